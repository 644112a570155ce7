"""The house rules of the package: layers import only downward, no file mixes concerns past ~800 lines.

Layers (docs/architecture.md): base (errors, paths, logs, controlsock) → spec → proxy → cluster → faults → run →
analysis, verdict → report → pipeline → cli. A module may import its own package and lower
layers; never a higher one, never a sibling package of the same layer.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import REPO

pytestmark = pytest.mark.unit

PACKAGE = REPO / "plugins" / "kafkaproof"
RANK = {"errors": 0, "paths": 0, "logs": 0, "controlsock": 0, "__init__": 0, "spec": 1, "proxy": 2, "cluster": 3,
        "faults": 4, "run": 5, "analysis": 6, "verdict": 6, "report": 7, "pipeline": 8, "notify": 8,
        "schedule": 8, "cli": 9,
        "__main__": 10}
MAX_LINES = 800


def unit_of(path: Path) -> str:
    """The layer unit a module belongs to: its top-level package or module name."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported_units(path: Path) -> set[str]:
    """Top-level kafkaproof units a module imports (absolute or relative, also inside functions)."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for kafkaproof/x.py, 1 for kafkaproof/pkg/x.py
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("kafkaproof."):
                    found.add(node.module.split(".")[1])
                continue
            up = node.level - 1  # levels above the module's own package
            if up > depth:
                continue
            if up == depth:  # relative to kafkaproof itself
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(a.name for a in node.names)
            else:
                found.add(unit_of(path))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("kafkaproof."):
                    found.add(a.name.split(".")[1])
    return found


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    assert {unit_of(p) for p in modules()} <= set(RANK), "add new packages to RANK (and to docs/architecture.md)"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_only_downward(path):
    own = unit_of(path)
    bad = [u for u in imported_units(path) - {own}
           if u in RANK and (RANK[u] > RANK[own] or (RANK[u] == RANK[own] and RANK[own] > 0))]
    assert not bad, f"{path.relative_to(PACKAGE)} ({own}, layer {RANK[own]}) imports {bad}"


def test_no_file_over_the_size_that_mixes_concerns():
    big = {str(p.relative_to(REPO)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these along their concerns: {big}"


# --- the cluster state file: read and written in one module (cluster/state.py) --------------------

STATE_MODULE = PACKAGE / "cluster" / "state.py"
# Keys only a cluster's state file holds: anything else reads them as `ClusterState` / `NodeState` fields.
STATE_FILE_KEYS = frozenset({"kept", "reuse", "runs", "rolled", "created_wall", "kafka_libs", "kafka_source", "slot",
                             "net_prefix", "client_config", "recreated"})
RAW_STATE_CALLS = frozenset({"slot_in_file"})  # state.py's one raw read, for the host's slot registry


def state_key_reads(path: Path) -> list[str]:
    """Where a module reads a state-file key off a dict (`x["kept"]`, `x.get("reuse")`), as `line: key`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if key in STATE_FILE_KEYS:
            found.append(f"{node.lineno}: {key}")
    return found


@pytest.mark.parametrize("path", [p for p in modules() if p != STATE_MODULE], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reads_the_cluster_state_as_a_dict(path):
    """A cluster's state is a `ClusterState` everywhere but in cluster/state.py: no module reads a state file's
    keys off a dict, opens the file itself, or writes another module's fields into it."""
    text = path.read_text()
    assert not state_key_reads(path), f"{path.relative_to(PACKAGE)} reads state-file keys: {state_key_reads(path)}"
    assert "state.json" not in text, f"{path.relative_to(PACKAGE)} names the state file; use cluster/state.py"
    raw = [n.lineno for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Attribute) and n.attr in RAW_STATE_CALLS]
    assert not raw or path == PACKAGE / "cluster" / "slots.py", f"raw state reads at lines {raw}"


def test_the_state_key_check_finds_what_it_is_for(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('st = {}\nst["kept"] = None\nif cluster.state().get("reuse"):\n    pass\n')
    assert state_key_reads(probe) == ["2: kept", "3: reuse"]


def test_dags_and_spark_never_touch_a_cluster_state():
    """The DAGs reach clusters through the pipeline, the Spark job never: neither imports cluster/state.py."""
    for root in (REPO / "dags", REPO / "spark"):
        for path in sorted(root.rglob("*.py")):
            text = path.read_text()
            assert "cluster.state" not in text and "load_state" not in text, path
