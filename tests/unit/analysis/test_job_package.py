"""The Spark job against kafkaproof: its ledger schemas (spark/kafkaproof_analysis/schemas.py) against the contract
(kafkaproof.spec.ledger), the job runs without the package, so a drift would go unnoticed until a run; its fault
families are the registry's (kafkaproof.spec.fault_families), generated into the zip spark-submit gets."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from kafkaproof.analysis import submit
from kafkaproof.spec import fault_families, ledger
from support import REPO, load_analysis_job

pytestmark = pytest.mark.unit

job = load_analysis_job()

ARROW_TO_SPARK = {pa.int32(): T.IntegerType(), pa.int64(): T.LongType(), pa.string(): T.StringType(),
                  pa.bool_(): T.BooleanType(), pa.float64(): T.DoubleType()}


def spark_type(arrow: pa.DataType) -> T.DataType:
    """The Spark type a Parquet column of `arrow`'s type reads as."""
    if pa.types.is_list(arrow):
        return T.ArrayType(spark_type(arrow.value_type))
    return ARROW_TO_SPARK[arrow]


def test_the_jobs_schemas_are_the_ledgers_tables():
    assert set(job.SCHEMAS) == set(ledger.TABLES)
    assert set(job.REQUIRED_TABLES) <= set(ledger.TABLES) - set(ledger.OPTIONAL_TABLES)


@pytest.mark.parametrize("table", sorted(ledger.TABLES))
def test_every_column_the_job_reads_is_the_ledgers_with_its_type(table):
    contract = {f.name: spark_type(f.type) for f in ledger.TABLES[table]}
    read = {f.name: f.dataType for f in job.SCHEMAS[table].fields}
    assert set(read) <= set(contract), f"{table}: the job reads columns the ledger lacks: {set(read) - set(contract)}"
    assert {c: t for c, t in read.items() if contract[c] != t} == {}, f"{table}: types differ from the ledger's"
    order = [c for c in contract if c in read]
    assert list(read) == order, f"{table}: keep the ledger's column order"
    assert all(f.nullable for f in job.SCHEMAS[table].fields)


def test_the_zip_carries_the_registrys_fault_families_generated():
    sources = dict(submit.job_sources())
    generated: dict = {}
    exec(sources[submit.FAMILY_REGISTRY], generated)
    assert generated["FAMILIES"] == fault_families.plain()
    assert not (REPO / "spark" / submit.FAMILY_REGISTRY).exists(), "generated into the zip only, never kept in spark/"


def test_the_zipped_job_reads_its_fault_families_without_kafkaproof():
    """The zip alone (no kafkaproof, no site-packages: as on a cluster's worker) gives the registry's families."""
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); import kafkaproof_analysis.families as f; "
             "assert 'kafkaproof' not in sys.modules; print(json.dumps(f.FAMILIES))")
    out = subprocess.run([sys.executable, "-E", "-S", "-c", probe, str(submit.job_py_files())], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert json.loads(out) == fault_families.plain()


def test_the_entry_file_prefers_the_zipped_package_to_the_one_beside_it():
    """As spark-submit runs it (its directory first on the path, the --py-files zip on PYTHONPATH), the driver
    imports the zip's package, the one with the generated families, and never kafkaproof."""
    spark = REPO / "spark"
    probe = (f"import sys, runpy; sys.path.insert(0, {str(spark)!r}); "
             f"runpy.run_path({str(spark / 'analyze.py')!r}, run_name='probe'); "
             "import kafkaproof_analysis.families as f; print(f.__file__, 'kafkaproof' in sys.modules)")
    zipped = submit.job_py_files()
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(zipped)}).stdout.split()
    assert out == [f"{zipped}/kafkaproof_analysis/families.py", "False"]


def test_the_source_trees_job_reads_the_registry():
    assert job.FAMILIES == fault_families.plain()


def test_the_zip_changes_with_the_registry(monkeypatch):
    before = submit.job_sources()
    changed = {**fault_families.plain(), "clock": {**fault_families.plain()["clock"], "kinds": ["clock_skew", "x"]}}
    monkeypatch.setattr(fault_families, "plain", lambda: changed)
    after = dict(submit.job_sources())
    assert after != dict(before) and "'x'" in after[submit.FAMILY_REGISTRY].decode()


def test_the_job_judges_every_family():
    assert set(job.FAMILY_JUDGES) == set(fault_families.FAMILIES)
    for name, family in fault_families.FAMILIES.items():
        target = family.target_prefix + "0" if family.target_prefix else "all"
        for kind in (*family.kinds, *family.steps):
            assert job.family_of({"kind": kind, "target": target}) == name
    assert job.family_of({"kind": "no_such_kind", "target": "all"}) is None
