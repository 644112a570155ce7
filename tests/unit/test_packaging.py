"""`pip install kafkaproof[...]` gives what the package imports: every third-party import is declared."""
from __future__ import annotations

import ast
import sys
import tomllib

import pytest

from support import REPO

pytestmark = pytest.mark.unit

# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml", "confluent_kafka": "confluent-kafka", "sqlalchemy": "sqlalchemy",
                 "great_expectations": "great-expectations", "airflow": "apache-airflow", "pyspark": "pyspark",
                 "pyarrow": "pyarrow", "pandas": "pandas", "jsonschema": "jsonschema", "kio": "kio", "alembic": "alembic",
                 "fastapi": "apache-airflow"}  # fastapi: the plugin's app runs in Airflow's api-server
OURS = {"kafkaproof"}


def imported_modules(paths) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - OURS


def declared() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name = lambda req: req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()  # noqa: E731
    out = {"": {name(r) for r in project["dependencies"]}}
    out.update({extra: {name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()})
    return out


def test_every_import_of_the_package_spark_job_dags_and_plugin_is_a_declared_dependency():
    deps = declared()
    everything = set().union(*deps.values())
    files = [*(REPO / "plugins" / "kafkaproof").rglob("*.py"), REPO / "plugins" / "kafkaproof_reports.py",
             *(REPO / "spark").glob("*.py"), *(REPO / "dags").glob("*.py")]
    missing = {m: DISTRIBUTIONS.get(m, m) for m in imported_modules(files) if DISTRIBUTIONS.get(m, m) not in everything}
    assert not missing, f"imported but not in pyproject.toml: {missing}"


def test_the_runtime_set_has_no_test_tools_and_the_library_core_needs_no_extra():
    deps = declared()
    assert not deps[""] & {"pytest", "pytest-timeout"}
    core = [p for p in (REPO / "plugins" / "kafkaproof").rglob("*.py")
            if not {"verdict", "analysis"} & set(p.relative_to(REPO / "plugins" / "kafkaproof").parts)
            and p.name not in ("pipeline.py",)]
    outside = {m for m in imported_modules(core) if DISTRIBUTIONS.get(m, m) not in deps[""]}
    assert outside <= {"pyspark", "great_expectations", "airflow", "uvloop"}, outside  # each imported where used
