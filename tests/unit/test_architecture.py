"""The house rules of the package: layers import only downward, no file mixes concerns past ~800 lines.

Layers (docs/architecture.md): base (errors, paths, logs, controlsock) → spec → proxy → cluster → faults → run →
analysis, verdict → report → pipeline → batch → cli. A module may import its own package and lower
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
        "schedule": 8, "hosts": 8, "batch": 9, "audit": 9.5, "upgrade_cli": 9.5, "cli": 10,
        "__main__": 11}
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
# Where the fault families' kinds may be listed: the registry alone. The Spark job (spark/, checked below) gets
# them generated from it (kafkaproof.analysis.submit.family_registry_source).
FAULT_REGISTRIES = {PACKAGE / "spec" / "fault_families.py"}


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


def test_the_kind_list_check_covers_the_spark_job():
    spark = {p.relative_to(REPO).as_posix() for p in sources_outside_the_registry() if p.is_relative_to(REPO / "spark")}
    assert {"spark/analyze.py", "spark/kafkaproof_analysis/families.py",
            "spark/kafkaproof_analysis/exercised.py"} <= spark


def test_the_kind_list_check_sees_a_kind_list():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write('A = ("kill", "stop")\nB = {"isolate": 1, "cut": 2}\nC = ("error", "latency", "full")\nD = ["kill"]\n')
        f.flush()
        assert [line for line, _ in fault_kind_lists(Path(f.name), {"kill", "stop", "isolate", "cut", "error",
                                                                    "latency"})] == [1, 2]


# --- one resolution: past `run.resolved.resolve`, only the ResolvedScenario ----------------------------------------

RESOLVER = ("run/resolved.py", "resolve")
# Modules past the resolver: what they run is a ResolvedScenario, never a Scenario plus loose overrides.
PAST_THE_RESOLVER = [PACKAGE / "run" / "scenario_run.py", PACKAGE / "pipeline.py", PACKAGE / "batch.py",
                     REPO / "dags" / "kafka_reliability.py"]
# Only the resolver applies overrides and draws a random schedule; it and `scenario validate` check client properties.
RESOLVING_CALLS = {"with_overrides": {RESOLVER}, "with_random_schedule": {RESOLVER},
                   "check_client_config": {RESOLVER, ("cli.py", "cmd_scenario_validate")}}


def override_fields() -> set[str]:
    from kafkaproof.run.resolved import OVERRIDE_FIELDS
    return set(OVERRIDE_FIELDS)


def named(path: Path) -> str:
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else str(path.relative_to(REPO))


SCENARIO_TYPES = {"Scenario", "ResolvedScenario", "PlannedRun"}
SCENARIO_NAMES = {"scenario", "scenario_name", "resolved", "run", "scn"}


def takes_a_scenario(arg: ast.arg) -> bool:
    """A parameter that is a scenario, a resolved one or a planned run (by its annotation or its name)."""
    annotation = ast.unparse(arg.annotation) if arg.annotation else ""
    return arg.arg in SCENARIO_NAMES or any(t in annotation.replace("|", " ").split() for t in SCENARIO_TYPES)


def functions(tree: ast.AST):
    """Every function (and method) definition with its name."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


@pytest.mark.parametrize("path", PAST_THE_RESOLVER, ids=named)
def test_no_override_is_threaded_past_the_resolver(path):
    """No function past the resolver takes a scenario (or a run of one) and an override of it (messages,
    kafka_version, ...) beside it, and no options class holds one: overrides come inside the ResolvedScenario."""
    tree = ast.parse(path.read_text())
    fields = override_fields()
    threaded = []
    for fn in functions(tree):
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if (named(path), fn.name) == RESOLVER or not any(takes_a_scenario(a) for a in args):
            continue
        threaded += [f"{fn.name}({a.arg})" for a in args if a.arg in fields]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        threaded += [f"{cls.name}.{a.target.id}" for a in cls.body
                     if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and a.target.id in fields]
    assert not threaded, f"{named(path)}: pass these in the ResolvedScenario (run.resolved.resolve): {threaded}"


def first_parameter(path: Path, qualified: str) -> str:
    """The annotation of the first parameter (after self) of function `qualified` (`Class.method` or `name`)."""
    tree = ast.parse(path.read_text())
    *owner, name = qualified.split(".")
    scope = tree.body
    if owner:
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner[0]]
        scope = cls.body
    (fn,) = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name]
    args = fn.args.args[1:] if owner else fn.args.args
    return ast.unparse(args[0].annotation) if args and args[0].annotation else ""


@pytest.mark.parametrize("path, function", [
    (PACKAGE / "run" / "scenario_run.py", "ScenarioRun.__init__"), (PACKAGE / "pipeline.py", "provision"),
    (PACKAGE / "pipeline.py", "run"), (PACKAGE / "pipeline.py", "run_scenario")], ids=lambda x: getattr(x, "name", x))
def test_the_run_and_its_cluster_take_the_resolved_scenario(path, function):
    assert first_parameter(path, function) == "ResolvedScenario"


def test_only_the_resolver_applies_overrides_draws_schedules_and_checks_clients():
    found: dict[str, set] = {name: set() for name in RESOLVING_CALLS}
    for path in [*modules(), REPO / "dags" / "kafka_reliability.py"]:
        tree = ast.parse(path.read_text())
        for fn in functions(tree):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if callee in found:
                        found[callee].add((named(path), fn.name))
    stray = {name: sorted(where - RESOLVING_CALLS[name]) for name, where in found.items()
             if where - RESOLVING_CALLS[name]}
    assert not stray, f"resolve once, in run.resolved.resolve; these resolve again: {stray}"




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
