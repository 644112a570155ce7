"""Exactly-once pipeline checks (issue 43): a read-process-write copier's transactions against its output.

On the pipeline ledger (plugins/kafkaproof/spec/pipeline_ledger.py; docs/analysis.md defines each kind):
eos_lost, eos_duplicated, eos_aborted_read, precommitted_read, offsets_outputs_disagree, eos_late_write,
hanging_transaction, lso_stall and the negative control eos_dirty_read. A run without all five tables cannot judge the pipeline
(`missing_tables`): no rows, and metrics' `pipeline.applicable` is false, which the verdict turns into
"not applicable" for the claim exactly_once_pipeline, never a pass.
"""
from __future__ import annotations

from typing import Any, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .columns import as_anomalies as _as_anomalies, count_if
from .schemas import PIPELINE_TABLES

TXN_FIELDS = ("txn", "transactional_id", "copier", "producer_id", "epoch", "outcome", "begin_ns", "commit_ns",
              "end_ns")
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000
# The coordinator looks for timed-out transactions this often (transaction.abort.timed.out.transaction.
# cleanup.interval.ms, 10 s by default): an open transaction may hold the LSO this much past its timeout.
ABORT_CHECK_INTERVAL_MS = 10_000


def lso_stall_threshold_ns(manifest: Mapping[str, Any] | None) -> int:
    """Pure: how long the last stable offset of an output partition may stand behind an open transaction
    before it is an lso_stall: the copiers' transaction timeout plus the coordinator's check interval."""
    pipeline = ((manifest or {}).get("scenario") or {}).get("pipeline") or {}
    timeout_ms = pipeline.get("transaction_timeout_ms") or DEFAULT_TRANSACTION_TIMEOUT_MS
    return int((timeout_ms + ABORT_CHECK_INTERVAL_MS) * 1_000_000)


def missing_tables(present: Mapping[str, bool]) -> list[str]:
    """Pure: the pipeline tables a run lacks, in ledger order; [] when the run can judge the pipeline."""
    return [t for t in PIPELINE_TABLES if not present.get(t)]


def pipeline_metrics_base(missing: list[str]) -> dict[str, Any]:
    """Pure: metrics' `pipeline` before counting: whether the run can judge the pipeline, and why not."""
    if not missing:
        return {"applicable": True, "missing_tables": [], "reason": None}
    return {"applicable": False, "missing_tables": list(missing),
            "reason": f"no pipeline ledger ({', '.join(f'{t}.parquet' for t in missing)} missing)"}


def _ids(col: str) -> Column:
    return F.array_join(F.col(col).cast("array<string>"), ", ")


def output_log(output_audit: DataFrame, txns: DataFrame) -> DataFrame:
    """The output log with each record's transaction and whether it committed: the audit's marker when
    known (`committed`), else its transaction's outcome (committed/aborted; indefinite: unknown)."""
    t = txns.select(*TXN_FIELDS).withColumnRenamed("outcome", "txn_outcome")
    by_outcome = F.when(F.col("txn_outcome") == "committed", True).when(F.col("txn_outcome") == "aborted", False)
    return (output_audit.join(F.broadcast(t), "txn", "left")
            .withColumn("is_committed", F.coalesce(F.col("committed"), by_outcome)))


def pipeline_anomalies(tables: Mapping[str, DataFrame], manifest: Mapping[str, Any] | None = None) -> DataFrame:
    """Every pipeline anomaly row of a run that has the pipeline ledger (see the module docstring)."""
    txns, recs = tables["transactions"], tables["transaction_records"]
    log = output_log(tables["output_audit"], txns)
    committed = (log.filter(F.col("is_committed") & (F.col("value_id") >= 0))  # -1: a foreign payload
                 .groupBy("value_id").agg(F.count("*").alias("n"), F.min("partition").alias("partition"),
                                          F.sort_array(F.collect_list("offset")).alias("offsets"),
                                          F.sort_array(F.collect_set("txn")).alias("txns")))
    inputs = (recs.filter(F.col("role") == "input").select("txn", "partition", "offset", "value_id")
              .join(F.broadcast(txns.select("txn", "outcome", "begin_ns", "end_ns")), "txn", "left"))
    by_committed = inputs.filter(F.col("outcome") == "committed")

    duplicated = committed.filter(F.col("n") > 1).select(
        F.lit("eos_duplicated").alias("kind"), "value_id", "partition", F.col("offsets")[0].alias("offset"),
        "offsets", F.format_string("value %s is in the committed output %s times: offsets %s of partition %s, "
                                   "transactions %s", F.col("value_id"), F.col("n"), _ids("offsets"),
                                   F.col("partition"), _ids("txns")).alias("detail"))

    lost = (by_committed.join(committed.select("value_id"), "value_id", "left_anti")
            .groupBy("value_id").agg(F.min("partition").alias("partition"), F.min("offset").alias("offset"),
                                     F.min("begin_ns").alias("t_start_ns"), F.max("end_ns").alias("t_end_ns"),
                                     F.sort_array(F.collect_set("txn")).alias("txns"))
            .select(F.lit("eos_lost").alias("kind"), "value_id", "partition", "offset", "t_start_ns", "t_end_ns",
                    F.format_string("input at offset %s of partition %s (value %s) was consumed by committed "
                                    "transaction(s) %s and has no committed output", F.col("offset"),
                                    F.col("partition"), F.col("value_id"), _ids("txns")).alias("detail")))

    disagree = _offsets_outputs_disagree(inputs, by_committed, committed, tables["pipeline_partitions"])
    reads = _read_anomalies(tables["output_reads"], log)
    hanging = hanging_transactions(txns, log).select(
        F.lit("hanging_transaction").alias("kind"), "value_id", "value_ids", "partition", "offset",
        F.col("begin_ns").alias("t_start_ns"),
        F.format_string("transaction %s (transactional id %s, producer id %s, epoch %s, copier %s) never ended: "
                        "%s records in output partition(s) %s have no marker; read_committed readers stall at "
                        "their last stable offset", F.col("txn"), F.col("transactional_id"),
                        F.col("producer_id"), F.col("epoch"), F.col("copier"), F.col("records"),
                        _ids("partitions")).alias("detail"))
    late = late_writes(log).select(
        F.lit("eos_late_write").alias("kind"), "value_id", "partition", "offset", F.col("end_ns").alias("t_start_ns"),
        F.format_string("offset %s of output partition %s (value %s) was written by transaction %s (transactional id "
                        "%s, producer id %s, epoch %s), which its copier aborted, and carries a commit marker: the "
                        "late write landed in a later transaction (%s) that committed it", F.col("offset"),
                        F.col("partition"), F.col("value_id"), F.col("txn"), F.col("transactional_id"),
                        F.col("producer_id"), F.col("epoch"),
                        F.coalesce(F.col("landed_in").cast("string"), F.lit("unknown"))).alias("detail"))
    stalls = lso_stalls(log, tables["output_reads"], lso_stall_threshold_ns(manifest)).select(
        F.lit("lso_stall").alias("kind"), "value_id", "partition", "offset", F.col("begin_ns").alias("t_start_ns"),
        F.col("recovered_ns").alias("t_end_ns"),
        F.format_string("the last stable offset of output partition %s stood at offset %s behind transaction %s "
                        "(transactional id %s, producer id %s, epoch %s, copier %s, %s) while later transactions "
                        "committed: %s committed records waited up to %.1f s after their commit for read_committed "
                        "readers, longer than the transaction timeout and the coordinator's check interval "
                        "(%.0f s); it moved on again %.1f s after the first of them was committed",
                        F.col("partition"), F.col("offset"), F.col("txn"), F.col("transactional_id"),
                        F.col("producer_id"), F.col("epoch"), F.col("copier"),
                        F.when(F.col("end_ns").isNull(), F.lit("never ended by its copier"))
                        .otherwise(F.concat(F.lit("ended "), F.col("outcome"))),
                        F.col("waited"), F.col("max_wait_ns") / F.lit(1e9),
                        F.lit(lso_stall_threshold_ns(manifest) / 1e9),
                        (F.col("recovered_ns") - F.col("first_commit_ns")) / F.lit(1e9)).alias("detail"))
    return (_as_anomalies(duplicated).unionByName(_as_anomalies(lost)).unionByName(_as_anomalies(disagree))
            .unionByName(_as_anomalies(reads)).unionByName(_as_anomalies(hanging))
            .unionByName(_as_anomalies(late)).unionByName(_as_anomalies(stalls)))


def late_writes(log: DataFrame) -> DataFrame:
    """Records of the output log whose own transaction (read from their key) its copier aborted but whose
    marker is a commit: Jepsen's delayed Produce, a write that reached the broker after its transaction ended
    and landed in a later one. `landed_in`: the committed transaction of the same transactional id with the
    nearest record in that partition."""
    late = log.filter((F.col("txn_outcome") == "aborted") & F.coalesce(F.col("committed"), F.lit(False)))
    hosts = log.filter((F.col("txn_outcome") == "committed") & F.col("is_committed")).select(
        "partition", F.col("transactional_id").alias("host_tid"), F.col("offset").alias("host_offset"),
        F.col("txn").alias("host_txn"))
    near = (late.join(hosts, (late["partition"] == hosts["partition"])
                      & (late["transactional_id"] == hosts["host_tid"]), "left")
            .groupBy(late["partition"], late["offset"])
            .agg(F.min(F.struct(F.abs(F.col("host_offset") - late["offset"]).alias("d"),
                                F.col("host_txn").alias("t")))["t"].alias("landed_in")))
    return late.join(near, ["partition", "offset"], "left")


def lso_stalls(log: DataFrame, reads: DataFrame, threshold_ns: int) -> DataFrame:
    """Output partitions whose last stable offset stood still behind one transaction while later transactions
    committed records there: each committed record a read_committed reader read more than `threshold_ns`
    after its commit was requested, blamed on the lowest-offset transaction below it in the partition that
    was still open at that commit (no end time, or an end after it). One row per (partition, blocking
    transaction), with when the partition moved on (the first such late read)."""
    first_read = (reads.filter(F.col("isolation") == "read_committed")
                  .groupBy("partition", "offset").agg(F.min("read_ns").alias("read_ns")))
    waited = (log.filter(F.col("is_committed") & F.col("commit_ns").isNotNull())
              .join(first_read, ["partition", "offset"], "inner")
              .withColumn("wait_ns", F.col("read_ns") - F.col("commit_ns"))
              .filter(F.col("wait_ns") > F.lit(threshold_ns))
              .select("partition", F.col("offset").alias("w_offset"), F.col("txn").alias("w_txn"),
                      F.col("commit_ns").alias("w_commit_ns"), "read_ns", "wait_ns"))
    firsts = log.groupBy("txn", "partition").agg(F.min("offset").alias("offset"), F.min("value_id").alias("value_id"))
    txns = log.select(*[F.col("txn_outcome").alias("outcome") if c == "outcome" else c for c in TXN_FIELDS]).distinct()
    holders = firsts.join(txns, "txn")
    blocked = (waited.join(holders, "partition")
               .filter((F.col("offset") < F.col("w_offset")) & (F.col("txn") != F.col("w_txn"))
                       & (F.col("end_ns").isNull() | (F.col("end_ns") > F.col("w_commit_ns")))))
    blame = (blocked.groupBy("partition", "w_offset")
             .agg(F.min(F.struct("offset", "txn"))["txn"].alias("txn")))
    rows = blocked.join(blame, ["partition", "w_offset", "txn"], "inner")
    return (rows.groupBy("partition", "txn", "offset", "value_id", *[c for c in TXN_FIELDS if c != "txn"])
            .agg(F.count("*").alias("waited"), F.max("wait_ns").alias("max_wait_ns"),
                 F.min("read_ns").alias("recovered_ns"), F.min("w_commit_ns").alias("first_commit_ns")))


def _offsets_outputs_disagree(inputs: DataFrame, by_committed: DataFrame, committed: DataFrame,
                              partitions: DataFrame) -> DataFrame:
    """Each input the copiers read against its partition's final committed offset: below it, with no
    committed output and no committed transaction that consumed it (that one is eos_lost); or at or above it
    (or no offset committed) with a committed output."""
    final = partitions.filter(F.col("txn").isNull()).groupBy("partition").agg(
        F.max("committed_offset").alias("committed_offset"))
    known = (inputs.select("partition", "offset", "value_id").distinct()
             .join(F.broadcast(final), "partition", "left")
             .join(committed.select("value_id", F.lit(True).alias("has_output")), "value_id", "left")
             .join(by_committed.select("value_id").distinct().withColumn("by_committed", F.lit(True)),
                   "value_id", "left"))
    has_output = F.coalesce(F.col("has_output"), F.lit(False))
    past = F.coalesce(F.col("offset") < F.col("committed_offset"), F.lit(False))
    advanced = past & ~has_output & ~F.coalesce(F.col("by_committed"), F.lit(False))
    behind = ~past & has_output
    return known.filter(advanced | behind).select(
        F.lit("offsets_outputs_disagree").alias("kind"), "value_id", "partition", "offset",
        F.when(advanced, F.format_string(
            "the committed offset %s of input partition %s is past offset %s (value %s), whose output no "
            "transaction committed", F.col("committed_offset"), F.col("partition"), F.col("offset"),
            F.col("value_id")))
        .otherwise(F.format_string(
            "value %s (offset %s of input partition %s) is in the committed output, but the partition's committed "
            "offset is %s: its input offset was not committed", F.col("value_id"), F.col("offset"),
            F.col("partition"), F.coalesce(F.col("committed_offset").cast("string"), F.lit("none"))))
        .alias("detail"))


def _read_anomalies(reads: DataFrame, log: DataFrame) -> DataFrame:
    """eos_aborted_read, precommitted_read (read_committed readers) and eos_dirty_read (read_uncommitted)."""
    r = reads.join(log.select("partition", "offset", "txn", "is_committed", "commit_ns"), ["partition", "offset"],
                   "left")
    rc = F.col("isolation") == "read_committed"
    aborted = F.coalesce(~F.col("is_committed"), F.lit(False))
    early = F.coalesce(F.col("is_committed") & (F.col("read_ns") < F.col("commit_ns")), F.lit(False))
    kind = (F.when(rc & aborted, "eos_aborted_read").when(rc & early, "precommitted_read")
            .when(~rc & aborted, "eos_dirty_read"))
    return r.withColumn("kind", kind).filter(F.col("kind").isNotNull()).select(
        "kind", "value_id", "partition", "offset", F.col("reader").alias("consumer"),
        F.col("read_ns").alias("t_start_ns"), F.col("commit_ns").alias("t_end_ns"),
        F.when(F.col("kind") == "precommitted_read", F.format_string(
            "reader %s (read_committed) read offset %s of output partition %s (value %s) %.3f s before transaction "
            "%s's commit was requested", F.col("reader"), F.col("offset"), F.col("partition"), F.col("value_id"),
            (F.col("commit_ns") - F.col("read_ns")) / F.lit(1e9), F.col("txn")))
        .otherwise(F.format_string(
            "reader %s (%s) read offset %s of output partition %s (value %s), written by aborted transaction %s",
            F.col("reader"), F.col("isolation"), F.col("offset"), F.col("partition"), F.col("value_id"),
            F.coalesce(F.col("txn").cast("string"), F.lit("(unknown)")))).alias("detail"))


def hanging_transactions(txns: DataFrame, log: DataFrame) -> DataFrame:
    """Transactions the copier never saw end (no end time, or an indefinite outcome) whose records in the
    output log carry no marker at all: one row each, with the partitions and value ids they hold."""
    held = log.groupBy("txn").agg(
        F.count("*").alias("records"), F.count("committed").alias("marked"),
        F.min("value_id").alias("value_id"), F.sort_array(F.collect_set("value_id")).alias("value_ids"),
        F.min("partition").alias("partition"), F.min("offset").alias("offset"),
        F.sort_array(F.collect_set("partition")).alias("partitions"))
    open_ = txns.filter(F.col("end_ns").isNull() | (F.col("outcome") == "indefinite")).select(*TXN_FIELDS)
    return open_.join(held.filter(F.col("marked") == 0), "txn", "inner")


def pipeline_metrics(tables: Mapping[str, DataFrame], missing: list[str],
                     manifest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """metrics.json's `pipeline`: applicability, transactions per outcome, reads per isolation, the hanging
    transactions named (producer id, epoch, partitions held)."""
    out = pipeline_metrics_base(missing)
    if missing:
        return out
    txns = tables["transactions"]
    out["transactions"] = {r["outcome"]: int(r["count"]) for r in txns.groupBy("outcome").count().collect()}
    row = tables["transaction_records"].agg(
        count_if(F.col("role") == "input").alias("inputs"), count_if(F.col("role") == "output").alias("outputs")
    ).collect()[0]
    out["records"] = {"inputs": int(row["inputs"] or 0), "outputs": int(row["outputs"] or 0)}
    out["reads"] = {r["isolation"]: int(r["count"])
                    for r in tables["output_reads"].groupBy("isolation").count().collect()}
    log = output_log(tables["output_audit"], txns)
    out["hanging"] = [{k: r[k] for k in ("txn", "transactional_id", "producer_id", "epoch", "copier", "partitions")}
                      for r in hanging_transactions(txns, log).orderBy("txn").collect()]
    out["lso_stall_threshold_s"] = lso_stall_threshold_ns(manifest) / 1e9
    out["lso_stalls"] = [
        {"partition": r["partition"], "offset": r["offset"], "txn": r["txn"], "transactional_id": r["transactional_id"],
         "producer_id": r["producer_id"], "epoch": r["epoch"], "max_wait_s": r["max_wait_ns"] / 1e9,
         "records_waited": r["waited"]}
        for r in lso_stalls(log, tables["output_reads"], lso_stall_threshold_ns(manifest))
        .orderBy("partition", "offset").collect()]
    out["late_writes"] = late_writes(log).count()
    return out
