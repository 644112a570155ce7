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


# --- fault kinds: one registry (issue 38.4) ----------------------------------------------------------------
# Where the fault families' kinds may be listed: the registry, and the Spark job's checked copy of it
# (tests/unit/analysis/test_job_package.py compares the two).
FAULT_REGISTRIES = {PACKAGE / "spec" / "fault_families.py", REPO / "spark" / "kafkaproof_analysis" / "families.py"}


def fault_kind_lists(path: Path, kinds: set[str]) -> list[tuple[int, list[str]]]:
    """Literal tuples, lists, sets (and dict keys) in `path` that hold two or more fault kind names and no other
    strings: kind lists (a word like "error" among other words is not one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        strings = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(set(strings)) >= 2 and set(strings) <= kinds:
            found.append((node.lineno, strings))
    return found


def sources_outside_the_registry() -> list[Path]:
    spark = sorted(p for p in (REPO / "spark").rglob("*.py") if "__pycache__" not in p.parts)
    dags = sorted((REPO / "dags").rglob("*.py"))
    return [p for p in modules() + spark + dags if p not in FAULT_REGISTRIES]


def test_no_fault_kind_list_outside_the_registry():
    from kafkaproof.spec.fault_families import FAMILIES
    kinds = {k for f in FAMILIES.values() for k in (*f.kinds, *f.steps)}
    lists = {str(p.relative_to(REPO)): found for p in sources_outside_the_registry()
             if (found := fault_kind_lists(p, kinds))}
    assert not lists, ("fault kinds are listed in their family (spec/fault_families.py) only; derive from it: "
                       f"{lists}")


def test_the_kind_list_check_sees_a_kind_list():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write('A = ("kill", "stop")\nB = {"isolate": 1, "cut": 2}\nC = ("error", "latency", "full")\nD = ["kill"]\n')
        f.flush()
        assert [line for line, _ in fault_kind_lists(Path(f.name), {"kill", "stop", "isolate", "cut", "error",
                                                                    "latency"})] == [1, 2]
