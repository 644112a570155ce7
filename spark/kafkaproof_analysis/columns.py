"""Column helpers shared by the checks: literal lookup maps, conditional counts, seconds, broadcast sides."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .base import NS_PER_S
from .schemas import ANOMALIES_SCHEMA


def _sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}L" if abs(v) >= 2**31 else str(v)
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def int_map(mapping: Mapping[int, Any], value_type: str) -> Column:
    """A literal Spark map column, built from one SQL expression (one JVM call, not one per entry)."""
    if not mapping:
        return F.expr(f"cast(map() as map<int,{value_type}>)")
    body = ", ".join(f"{int(k)}, {_sql_literal(v)}" for k, v in mapping.items())
    return F.expr(f"cast(map({body}) as map<int,{value_type}>)")


def lookup_col(mapping: Mapping[int, Any], value_type: str, key: Column, default: Any) -> Column:
    return F.coalesce(F.try_element_at(int_map(mapping, value_type), key.cast("int")), F.lit(default))


def count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def second_of(ts: Column, t0: int) -> Column:
    return F.floor((ts - F.lit(t0)) / F.lit(NS_PER_S)).cast("long")


def active_fault_ids(faults: Sequence[Mapping[str, Any]], start: Column, end: Column, end_ns: int) -> Column:
    """array<string> of the fault ids whose window [start_ns, heal_ns] overlaps [start, end]."""
    if not faults:
        return F.array().cast("array<string>")
    hits = [
        F.when((F.lit(f["start_ns"]) <= end) & (F.lit(f["heal_ns"] if f["heal_ns"] is not None else end_ns) >= start),
               F.lit(f["fault_id"]))
        for f in faults
    ]
    return F.array_compact(F.array(*hits))


def small_side(df: DataFrame, broadcast_limit: int) -> DataFrame:
    """`df` marked for a broadcast join when it has at most `broadcast_limit` rows (it is counted)."""
    return F.broadcast(df) if df.count() <= broadcast_limit else df


def as_anomalies(df: DataFrame) -> DataFrame:
    """`df`'s columns named as anomaly columns, in anomalies.parquet's order; the others null."""
    df = df.withColumn("producer", F.when(F.col("value_id") >= 0, F.shiftright("value_id", 32)))
    return df.select(*[(F.col(f.name) if f.name in df.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                       for f in ANOMALIES_SCHEMA.fields])
