"""The house rules of the Spark job (spark/): one thin entry file, a package whose modules import only the
ones below them (the order of spark/kafkaproof_analysis/__init__.py), pyspark and the standard library only
(spark-submit ships the job without kafkaproof; families.py alone falls back on kafkaproof's registry when
run from the source tree, without the zip's generated module), and no file over the line cap."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from support import REPO

pytestmark = pytest.mark.unit

SPARK = REPO / "spark"
PACKAGE = SPARK / "kafkaproof_analysis"
# Lowest first: a module may import only modules before it.
ORDER = ("base", "families", "schemas", "columns", "context", "store", "values", "causes", "offsets", "polls", "commits", "pipeline",
         "share", "latency",
         "exercised", "metrics", "job")
PURE = {"base", "families"}  # no pyspark: the vocabulary and locations, the fault families
# Generated into the zip only (kafkaproof.analysis.submit): the fault families from kafkaproof's registry.
GENERATED = {"family_registry"}
# families.py reads the registry from kafkaproof itself when run from the source tree (no zip, no generated module).
FALLBACK = {"families": {"kafkaproof"}}
MAX_LINES = 500
MAX_ENTRY_LINES = 40


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(sibling modules imported relatively, top-level names imported absolutely), also inside functions."""
    siblings, absolute = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1, f"{path.name}: imports from above its package"
            siblings.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom):
            absolute.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            absolute.update(a.name.split(".")[0] for a in node.names)
    return siblings, absolute


def test_every_module_has_its_place_in_the_order():
    assert {p.stem for p in modules()} == set(ORDER), "add new modules to ORDER (and to the package's docstring)"
    listed = (PACKAGE / "__init__.py").read_text().split("Modules,", 1)[1]
    places = [re.search(rf"\b{name}\b", listed) for name in ORDER]
    assert all(places) and [m.start() for m in places] == sorted(m.start() for m in places), \
        "the package's docstring lists the modules in ORDER"


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_modules_import_only_downward_and_only_pyspark_and_the_standard_library(path):
    siblings, absolute = imports(path)
    assert not siblings & GENERATED or path.stem == "families", f"{path.name}: the generated modules are families.py's"
    upward = {m for m in siblings - GENERATED if ORDER.index(m) >= ORDER.index(path.stem)}
    assert not upward, f"{path.name} imports {sorted(upward)}, which are not below it in {ORDER}"
    allowed = set(sys.stdlib_module_names) | ({"__future__"} if path.stem in PURE else {"__future__", "pyspark"})
    allowed |= FALLBACK.get(path.stem, set())
    assert absolute <= allowed, f"{path.name} imports {sorted(absolute - allowed)}: the job runs without them"


def test_the_entry_file_is_thin_and_imports_the_package_only():
    entry = SPARK / "analyze.py"
    assert len(entry.read_text().splitlines()) <= MAX_ENTRY_LINES
    siblings, absolute = imports(entry)
    assert not siblings and absolute <= set(sys.stdlib_module_names) | {"__future__", "kafkaproof_analysis"}


def test_no_file_of_the_job_over_the_line_cap():
    big = {str(p.relative_to(REPO)): n for p in SPARK.rglob("*.py")
           if "__pycache__" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these along their concerns: {big}"
