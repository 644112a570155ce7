"""Counts of a run's analysis for metrics.json: run bounds, outcomes, anomalies per kind, phase timings."""
from __future__ import annotations

import time

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .base import EXAMPLES_PER_KIND, KINDS
from .columns import count_if


def run_bounds(sends: DataFrame, reads: DataFrame) -> tuple[int | None, int | None]:
    """(first intended_ns, last timestamp seen in sends/reads), in one job."""
    last = F.greatest("intended_ns", "send_ns", "complete_ns")
    row = sends.agg(F.min("intended_ns").alias("first"), F.max(last).alias("last_s")).crossJoin(
        reads.agg(F.max("read_ns").alias("last_r"))).collect()[0]
    lasts = [x for x in (row["last_s"], row["last_r"]) if x is not None]
    return row["first"], max(lasts) if lasts else None


def aborted_in_log(sends: DataFrame, audit: DataFrame) -> int:
    """Distinct values of aborted transactions that sit in the full (read_uncommitted) log."""
    aborted = sends.filter(F.col("txn_outcome") == "abort").select("value_id")
    logged = audit.filter(F.col("isolation") == "read_uncommitted").select("value_id").distinct()
    return logged.join(aborted, "value_id").count()


def outcome_counts(values: DataFrame, audit: DataFrame, reads: DataFrame) -> dict[str, int]:
    """Counts of outcomes, of the log and of reads, in one job."""
    iso = F.col("isolation")
    row = values.agg(
        count_if(F.col("sent")).alias("sent"), count_if(F.col("outcome") == "ok").alias("acked"),
        count_if(F.col("outcome") == "fail").alias("failed"),
        count_if(F.col("outcome") == "indefinite").alias("indefinite"),
        count_if(F.col("read_count") > 0).alias("consumed"), count_if(F.col("log_count") > 0).alias("in_log"),
        count_if(F.col("expected")).alias("expected"),
    ).crossJoin(audit.agg(
        count_if(iso == "read_uncommitted").alias("log_records"),
        count_if((iso == "read_uncommitted") & (F.col("value_id") == -1)).alias("foreign_records"),
        count_if(iso == "read_committed").alias("log_records_committed"),
    )).crossJoin(reads.agg(F.count("*").alias("reads"))).collect()[0]
    return {k: int(v or 0) for k, v in row.asDict().items()}


def count_and_examples(anomalies: DataFrame) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Rows per kind and the first value ids (ascending) per kind, in one job."""
    w = Window.partitionBy("kind").orderBy(F.col("value_id").asc_nulls_last(), "partition", "offset")
    rows = (anomalies.withColumn("_n", F.row_number().over(w))
            .withColumn("_total", F.count("*").over(Window.partitionBy("kind")))
            .filter(F.col("_n") <= EXAMPLES_PER_KIND).orderBy("kind", "_n").collect())
    counts = {k: 0 for k in KINDS}
    examples: dict[str, list[int]] = {k: [] for k in KINDS}
    for r in rows:
        counts[r["kind"]] = int(r["_total"])
        if r["value_id"] is not None:
            examples[r["kind"]].append(int(r["value_id"]))
    return counts, examples


class PhaseClock:
    """Seconds per phase of a run's analysis (metrics' `job_phases`), each logged as it ends."""

    def __init__(self, name: str, log) -> None:
        self.name, self.log = name, log
        self.started = self.last = time.monotonic()
        self.phases: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now
        self.log(f"[analyze] {self.name}: {phase} ({self.phases[phase]:.1f}s; {now - self.started:.1f}s in all)")

    def total(self) -> float:
        return round(time.monotonic() - self.started, 3)
