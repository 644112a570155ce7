"""The Spark job's copies against kafkaproof's: the ledger schemas (spark/kafkaproof_analysis/schemas.py) against
the contract (kafkaproof.spec.ledger), the fault families (families.py) against their registry
(kafkaproof.spec.fault_families): the job runs without the package, so a drift would go unnoticed until a run."""
from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from kafkaproof.spec import fault_families, ledger
from support import load_analysis_job

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


def test_the_jobs_fault_families_are_the_registrys():
    assert job.FAMILIES == fault_families.plain(), ("spark/kafkaproof_analysis/families.py drifted from "
                                                    "kafkaproof.spec.fault_families: copy plain() of the registry")


def test_the_job_judges_every_family():
    assert set(job.FAMILY_JUDGES) == set(fault_families.FAMILIES)
    for name, family in fault_families.FAMILIES.items():
        target = family.target_prefix + "0" if family.target_prefix else "all"
        for kind in (*family.kinds, *family.steps):
            assert job.family_of({"kind": kind, "target": target}) == name
    assert job.family_of({"kind": "no_such_kind", "target": "all"}) is None
