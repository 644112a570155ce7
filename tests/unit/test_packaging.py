"""`pip install kafkaproof[...]` gives what the package imports: every third-party import is declared,
and the CLI starts without the heavy extras. (tests/unit/test_wheel.py installs a real wheel.)"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from kafkaproof import paths
from support import REPO

pytestmark = pytest.mark.unit

OURS = {"kafkaproof", "kafkaproof_analysis"}  # the package and the Spark job's own (spark/kafkaproof_analysis)
LIBRARY = [*sorted((REPO / "plugins" / "kafkaproof").rglob("*.py")), *sorted((REPO / "spark").rglob("*.py"))]
# Code that runs only inside Airflow (the plugin, the DAGs) may also use what Airflow itself requires.
AIRFLOW_SIDE = [REPO / "plugins" / "kafkaproof_reports.py", *sorted((REPO / "dags").glob("*.py"))]
# Imported lazily where used; a command that needs one and lacks it names the extra to install.
LAZY_EXTRAS = {"pyspark", "great_expectations", "airflow", "uvloop", "psycopg2"}  # psycopg2: run/processed.py's PostgreSQL source
TEST_TOOLS = {"pytest", "pytest-timeout"}


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a distribution name from requirement {requirement!r}"
    return normalized(match.group(1))


def imported_modules(files) -> dict[str, set[str]]:
    """Top-level third-party modules imported by `files` (also inside functions) -> the files importing them."""
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OURS:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def declared() -> dict[str, set[str]]:
    """pyproject.toml's requirements: "" the runtime set, else one entry per optional extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = {"": {requirement_name(r) for r in project["dependencies"]}}
    out.update({extra: {requirement_name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()})
    return out


@cache
def providers() -> dict[str, list[str]]:
    """Import name -> the installed distributions providing it (normalized names)."""
    return {module: [normalized(d) for d in dists]
            for module, dists in importlib.metadata.packages_distributions().items()}


def requires_closure(names: set[str]) -> set[str]:
    """`names` and every distribution they require, transitively, as installed (extras' requirements left out)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in reqs if not re.search(r"\bextra\s*==", r)]
    return seen


def undeclared(files, allowed: set[str]) -> dict[str, str]:
    """Modules imported by `files` that no distribution in `allowed` provides -> why."""
    problems = {}
    for module, importers in sorted(imported_modules(files).items()):
        dists = providers().get(module)
        if not dists:
            problems[module] = f"no installed distribution provides it (imported by {sorted(importers)})"
        elif not set(dists) & allowed:
            problems[module] = f"provided by {dists}, none of them declared (imported by {sorted(importers)})"
    return problems


def test_every_third_party_import_of_the_library_and_the_spark_job_is_declared_in_pyproject():
    everything = set().union(*declared().values())
    problems = undeclared(LIBRARY, everything)
    assert not problems, f"declare these in pyproject.toml's dependencies or an extra: {problems}"


def test_the_airflow_plugin_and_dags_import_only_declared_distributions_or_what_airflow_brings():
    deps = declared()
    problems = undeclared(AIRFLOW_SIDE, set().union(*deps.values()) | requires_closure(deps["airflow"]))
    assert not problems, problems


def test_the_runtime_set_has_no_test_tools_and_the_library_core_needs_no_extra():
    deps = declared()
    assert not (deps[""] | set().union(*(v for k, v in deps.items() if k != "test"))) & TEST_TOOLS
    package = REPO / "plugins" / "kafkaproof"
    core = [p for p in package.rglob("*.py")
            if not {"verdict", "analysis"} & set(p.relative_to(package).parts) and p.name != "pipeline.py"]
    outside = {m for m, _ in imported_modules(core).items() if not set(providers().get(m, [])) & deps[""]}
    assert outside <= LAZY_EXTRAS, outside  # each imported where it is used


def test_the_cli_starts_and_lists_and_validates_scenarios_without_spark_great_expectations_or_airflow(tmp_path):
    # Importing one of them costs seconds and needs its extra: `kafkaproof --help` must work without.
    probe = ("import contextlib, io, json, sys\n"
             "import kafkaproof.cli as cli\n"
             "at_start = sorted({m.split('.')[0] for m in sys.modules})\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    codes = [cli.main(['scenario', 'list']), cli.main(['scenario', 'validate', 'baseline'])]\n"
             "print(json.dumps({'at_start': at_start, 'after': sorted({m.split('.')[0] for m in sys.modules}),"
             " 'codes': codes}))\n")
    env = {k: v for k, v in os.environ.items() if k != "KAFKAPROOF_SCENARIOS"}
    out = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                    cwd=tmp_path, env=env, timeout=120).stdout)
    assert out["codes"] == [0, 0]
    heavy = {"pyspark", "great_expectations", "airflow"}
    assert not heavy & set(out["at_start"]), "imported by `import kafkaproof.cli`"
    assert not heavy & set(out["after"]), "imported by `kafkaproof scenario list/validate`"


def load_setup_py():
    spec = importlib.util.spec_from_file_location("kafkaproof_setup_py", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only as __main__ (how setuptools runs setup.py)
    return module


def test_the_wheel_carries_the_data_directories_share_dir_knows_without_build_outputs(tmp_path):
    setup_py = load_setup_py()
    assert tuple(setup_py.SHARED) == paths.SHARED_DIRS
    files = setup_py.shared_files()
    assert {f.split("/")[0] for f in files} == set(paths.SHARED_DIRS)
    assert "spark/analyze.py" in files and "java/pom.xml" in files and "expectations/policy.yaml" in files
    assert not [f for f in files if {"target", "__pycache__"} & set(f.split("/")) or f.endswith(".pyc")]
    for script in setup_py.SHARED["scripts"]:  # what the compose backend runs, found through share_dir
        assert (paths.share_dir("scripts") / script).is_file()


def test_in_a_checkout_share_dir_is_the_checkouts_own_directory(monkeypatch):
    assert paths.repo_root() == REPO
    for name in paths.SHARED_DIRS:
        assert paths.share_dir(name) == REPO / name
    monkeypatch.delenv("KAFKAPROOF_SCENARIOS", raising=False)
    assert paths.scenarios_dir() == REPO / "scenarios"
    monkeypatch.setenv("KAFKAPROOF_SCENARIOS", "/elsewhere")
    assert paths.scenarios_dir() == Path("/elsewhere")
    with pytest.raises(ValueError, match="'dags' is not one of kafkaproof's data directories"):
        paths.share_dir("dags")


def test_an_installation_without_its_data_directories_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "repo_root", lambda: None)
    monkeypatch.setattr(paths, "PACKAGED_SHARE", tmp_path / "_share")
    with pytest.raises(paths.InstallError, match=r"kafkaproof's expectations/ directory is missing .*incomplete"):
        paths.share_dir("expectations")
