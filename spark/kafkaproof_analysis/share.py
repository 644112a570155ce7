"""Share-group checks (issue 46, KIP-932): every delivery and acknowledgement of a share group against the log.

On the share ledger (plugins/kafkaproof/spec/share_ledger.py; docs/analysis.md "Share groups" defines each kind):

* share_accepted_twice: a record accepted (successfully) by more than one delivery across the group;
* share_undelivered: a record in the log never delivered to the group;
* share_not_returned: a record released (or its lock timed out, or its release failed) below the delivery
  limit and never delivered again: released records come back;
* share_rejected_returned: a record delivered again after a successful reject: rejected records never come back;
* share_concurrent_acquisition: a delivery acquired while an earlier delivery of the offset still held it (before
  that one's acknowledgement, or its lock timeout when it had none);
* share_delivery_count: a redelivery whose delivery count is not the previous one + 1;
* share_past_limit: a delivery counted above the group's limit, or one after a delivery at the limit: a record at
  the limit is given up (archived), never delivered again.

The failover exemption: KIP-932 keeps a record's Acquired state (its lock, the count of a delivery not yet
acknowledged) in the share-partition leader's memory only, so a new leader voids the locks and delivers the record
again at the count it last persisted. A redelivery with a leader change of its partition possibly between it and
the previous delivery (`leader_changes`, from the cluster snapshots) is no share_concurrent_acquisition, its count
may repeat (never more than the previous + 1: a jump is still share_delivery_count), and a count at the limit may
repeat (above it is still share_past_limit).

Each record of the log ends with one outcome (metrics' `share.outcomes`): accepted, rejected, given_up (its last
delivery was at the limit and not accepted nor rejected), never_delivered, unconfirmed (its last delivery's accept
or reject failed, e.g. its answer was lost, and it never came back: the broker may have taken it, so it is no
share_not_returned), or not_returned. A run without all three
tables cannot judge the share group (`missing_share_tables`): no rows, and metrics' `share.applicable` is false,
which the verdict turns into "not applicable" for the claim share_group, never a pass.
"""
from __future__ import annotations

from typing import Any, Mapping

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .base import NS_PER_MS
from .columns import as_anomalies as _as_anomalies, count_if
from .schemas import SHARE_TABLES

# Kafka's defaults: group.share.delivery.count.limit, group.share.record.lock.duration.ms (spec/share_ledger.py).
DEFAULT_DELIVERY_LIMIT = 5
DEFAULT_LOCK_TIMEOUT_MS = 30_000
OUTCOMES = ("accepted", "rejected", "given_up", "never_delivered", "unconfirmed", "not_returned")
FINAL_ACKS = ("accept", "reject")  # a failed one of these, never followed by a delivery: outcome unconfirmed
SHARE_KINDS = ("share_accepted_twice", "share_undelivered", "share_not_returned", "share_rejected_returned",
               "share_concurrent_acquisition", "share_delivery_count", "share_past_limit")


def missing_share_tables(present: Mapping[str, bool]) -> list[str]:
    """Pure: the share tables a run lacks, in ledger order; [] when the run can judge the share group."""
    return [t for t in SHARE_TABLES if not present.get(t)]


def share_settings(manifest: Mapping[str, Any]) -> tuple[int, int]:
    """Pure: (delivery limit, lock timeout ms) of the run's share group: the scenario's `share` section, else
    Kafka's defaults."""
    share = ((manifest.get("scenario") or {}).get("share")) or {}
    limit = share.get("delivery_limit")
    lock = share.get("lock_timeout_ms")
    return (int(limit) if limit is not None else DEFAULT_DELIVERY_LIMIT,
            int(lock) if lock is not None else DEFAULT_LOCK_TIMEOUT_MS)


def share_metrics_base(missing: list[str], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: metrics' `share` before counting: whether the run can judge the share group, and why not."""
    limit, lock_ms = share_settings(manifest)
    base = {"delivery_limit": limit, "lock_timeout_ms": lock_ms}
    if not missing:
        return {"applicable": True, "missing_tables": [], "reason": None, **base}
    return {"applicable": False, "missing_tables": list(missing),
            "reason": f"no share ledger ({', '.join(f'{t}.parquet' for t in missing)} missing)", **base}


def deliveries_with_acks(deliveries: DataFrame, acks: DataFrame, lock_ms: int) -> DataFrame:
    """Each delivery with its first successful acknowledgement (`ack_type`, `ack_ns`; null: none), its first
    failed accept or reject (`failed_ack`; null: none) and the end of its acquisition (`end_ns`): the
    acknowledgement, or the lock timeout when earlier or when there was none."""
    ok = (acks.filter(F.col("success")).groupBy("delivery_id")
          .agg(F.min_by("type", "ack_ns").alias("ack_type"), F.min("ack_ns").alias("ack_ns")))
    failed = (acks.filter(~F.col("success") & F.col("type").isin(*FINAL_ACKS)).groupBy("delivery_id")
              .agg(F.min_by("type", "ack_ns").alias("failed_ack")))
    lock_end = F.col("acquired_ns") + F.lit(lock_ms * NS_PER_MS)
    return (deliveries.join(ok, "delivery_id", "left").join(failed, "delivery_id", "left")
            .withColumn("lock_end_ns", lock_end)
            .withColumn("end_ns", F.when(F.col("ack_ns").isNotNull(), F.least("ack_ns", lock_end))
                        .otherwise(lock_end)))


def leader_changes(snapshots: DataFrame) -> DataFrame:
    """Per partition, each leader change the cluster snapshots saw: between `from_ns` (the last snapshot with the
    old leader) and `to_ns` (the first with another, or none: -1 counts as a leader too)."""
    w = Window.partitionBy("partition").orderBy("ts_ns")
    return (snapshots.select("partition", "ts_ns", "leader")
            .withColumn("prev_leader", F.lag("leader").over(w)).withColumn("from_ns", F.lag("ts_ns").over(w))
            .filter(F.col("prev_leader").isNotNull() & (F.col("leader") != F.col("prev_leader")))
            .select("partition", "from_ns", F.col("ts_ns").alias("to_ns")))


def redeliveries_with_failover(d: DataFrame, changes: DataFrame) -> DataFrame:
    """Each delivery with the previous delivery of its offset (`prev_acquired_ns`, `prev_count`, `prev_consumer`;
    null for the first) and `failover`: a leader change of its partition possibly between the two acquisitions (a
    change seen between snapshots `from_ns` and `to_ns` with from_ns < acquired_ns and to_ns > prev_acquired_ns)."""
    w = Window.partitionBy("partition", "offset").orderBy("acquired_ns", "delivery_id")
    x = (d.withColumn("prev_acquired_ns", F.lag("acquired_ns").over(w))
         .withColumn("prev_count", F.lag("delivery_count").over(w))
         .withColumn("prev_consumer", F.lag("consumer").over(w)))
    c = changes.select(F.col("partition").alias("c_partition"), "from_ns", "to_ns")
    over = (x.filter(F.col("prev_acquired_ns").isNotNull())
            .join(c, (F.col("partition") == F.col("c_partition")) & (F.col("from_ns") < F.col("acquired_ns"))
                  & (F.col("to_ns") > F.col("prev_acquired_ns")), "left_semi")
            .select("delivery_id", F.lit(True).alias("failover")))
    return x.join(over, "delivery_id", "left").withColumn("failover", F.coalesce("failover", F.lit(False)))


def _delivery_anomalies(d: DataFrame, limit: int) -> DataFrame:
    """share_concurrent_acquisition, share_delivery_count, share_past_limit and share_rejected_returned: each
    delivery (of `redeliveries_with_failover`) against the earlier deliveries of its offset, with the failover
    exemption (module docstring); one row per (kind, partition, offset)."""
    w = Window.partitionBy("partition", "offset").orderBy("acquired_ns", "delivery_id")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    x = (d.withColumn("prev_end", F.max("end_ns").over(before))
         .withColumn("max_before", F.max("delivery_count").over(before))
         .withColumn("rejected_at", F.min(F.when(F.col("ack_type") == "reject", F.col("ack_ns"))).over(before)))
    where = F.format_string("offset %s of partition %s (value %s)", F.col("offset"), F.col("partition"),
                            F.col("value_id"))
    failover = F.col("failover")
    count_ok = F.when(failover, (F.col("delivery_count") >= 1) & (F.col("delivery_count") <= F.col("prev_count") + 1)
                      ).otherwise(F.col("delivery_count") == F.col("prev_count") + 1)
    checks = [
        ("share_concurrent_acquisition", (F.col("acquired_ns") < F.col("prev_end")) & ~failover, F.col("prev_end"),
         F.format_string("%s was acquired by consumer %s (delivery %s) %.3f s before an earlier delivery (last: "
                         "consumer %s) released, rejected or timed out", where, F.col("consumer"),
                         F.col("delivery_count"), (F.col("prev_end") - F.col("acquired_ns")) / F.lit(1e9),
                         F.col("prev_consumer"))),
        ("share_delivery_count", F.col("prev_count").isNotNull() & ~count_ok, F.col("acquired_ns"),
         F.format_string("%s was redelivered to consumer %s with delivery count %s after count %s (expected %s)",
                         where, F.col("consumer"), F.col("delivery_count"), F.col("prev_count"),
                         F.when(failover, F.format_string("at most %s: its partition's leader changed in between",
                                                          F.col("prev_count") + 1))
                         .otherwise((F.col("prev_count") + 1).cast("string")))),
        ("share_past_limit", (F.col("delivery_count") > F.lit(limit))
         | (F.coalesce(F.col("max_before") >= F.lit(limit), F.lit(False)) & ~failover), F.col("acquired_ns"),
         F.format_string("%s was delivered to consumer %s with delivery count %s; the group's limit is %s: a record "
                         "at the limit is given up, never delivered again", where, F.col("consumer"),
                         F.col("delivery_count"), F.lit(limit))),
        ("share_rejected_returned", F.col("rejected_at").isNotNull(), F.col("rejected_at"),
         F.format_string("%s was delivered again to consumer %s (delivery count %s) after it was rejected", where,
                         F.col("consumer"), F.col("delivery_count"))),
    ]
    rows = None
    for kind, cond, t_end, detail in checks:
        one = x.filter(cond).select(F.lit(kind).alias("kind"), "partition", "offset", "value_id", "consumer",
                                    "consumer_pid", F.col("acquired_ns").alias("t_start_ns"),
                                    t_end.alias("t_end_ns"), detail.alias("detail"))
        rows = one if rows is None else rows.unionByName(one)
    return (rows.groupBy("kind", "partition", "offset")
            .agg(F.min("value_id").alias("value_id"), F.min_by("consumer", "t_start_ns").alias("consumer"),
                 F.min_by("consumer_pid", "t_start_ns").alias("consumer_pid"),
                 F.min("t_start_ns").alias("t_start_ns"), F.min_by("t_end_ns", "t_start_ns").alias("t_end_ns"),
                 F.min_by("detail", "t_start_ns").alias("detail")))


def record_outcomes(d: DataFrame, audit: DataFrame, limit: int) -> DataFrame:
    """One row per record of the log (and per offset delivered outside it): its deliveries, accepts and rejects,
    and its `outcome` (see OUTCOMES)."""
    per_offset = d.groupBy("partition", "offset").agg(
        F.count("*").alias("deliveries"), count_if(F.col("ack_type") == "accept").alias("accepts"),
        count_if(F.col("ack_type") == "reject").alias("rejects"), F.max("delivery_count").alias("max_count"),
        F.min("value_id").alias("delivered_value_id"), F.max("end_ns").alias("last_end_ns"),
        F.max_by("ack_type", "acquired_ns").alias("last_ack"), F.max_by("consumer", "acquired_ns").alias("last_consumer"),
        F.max_by("failed_ack", "acquired_ns").alias("last_failed_ack"), F.min("acquired_ns").alias("first_ns"))
    log = audit.select("partition", "offset", "value_id").distinct().withColumn("in_log", F.lit(True))
    r = log.join(per_offset, ["partition", "offset"], "full_outer").withColumn(
        "value_id", F.coalesce("value_id", "delivered_value_id"))
    outcome = (F.when(F.col("accepts") > 0, "accepted").when(F.col("rejects") > 0, "rejected")
               .when(F.col("deliveries").isNull(), "never_delivered")
               .when(F.col("last_ack").isNull() & F.col("last_failed_ack").isNotNull(), "unconfirmed")
               .when(F.col("max_count") >= F.lit(limit), "given_up").otherwise("not_returned"))
    return r.withColumn("outcome", outcome)


def share_anomalies(tables: Mapping[str, DataFrame], manifest: Mapping[str, Any]) -> DataFrame:
    """Every share-group anomaly row of a run that has the share ledger (see the module docstring)."""
    limit, lock_ms = share_settings(manifest)
    d = deliveries_with_acks(tables["share_deliveries"], tables["share_acks"], lock_ms)
    records = record_outcomes(d, tables["audit"], limit)
    d = redeliveries_with_failover(d, leader_changes(tables["cluster_snapshots"]))
    where = F.format_string("offset %s of partition %s (value %s)", F.col("offset"), F.col("partition"),
                            F.col("value_id"))
    twice = records.filter(F.col("accepts") > 1).select(
        F.lit("share_accepted_twice").alias("kind"), "partition", "offset", "value_id",
        F.col("first_ns").alias("t_start_ns"), F.col("last_end_ns").alias("t_end_ns"),
        F.format_string("%s was accepted %s times across the group (%s deliveries)", where, F.col("accepts"),
                        F.col("deliveries")).alias("detail"))
    undelivered = records.filter(F.col("in_log") & (F.col("outcome") == "never_delivered")).select(
        F.lit("share_undelivered").alias("kind"), "partition", "offset", "value_id",
        F.format_string("%s is in the log and was never delivered to the share group", where).alias("detail"))
    not_returned = records.filter(F.col("outcome") == "not_returned").select(
        F.lit("share_not_returned").alias("kind"), "partition", "offset", "value_id",
        F.col("last_consumer").alias("consumer"), F.col("first_ns").alias("t_start_ns"),
        F.col("last_end_ns").alias("t_end_ns"),
        F.format_string("%s: its last delivery (count %s of at most %s, consumer %s) ended by %s and it never came "
                        "back", where, F.col("max_count"), F.lit(limit), F.col("last_consumer"),
                        F.coalesce(F.col("last_ack"), F.lit("a lock timeout or a failed release")))
        .alias("detail"))
    return (_as_anomalies(twice).unionByName(_as_anomalies(undelivered)).unionByName(_as_anomalies(not_returned))
            .unionByName(_as_anomalies(_delivery_anomalies(d, limit))))


def share_metrics(tables: Mapping[str, DataFrame], missing: list[str], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """metrics.json's `share`: applicability, the group's limit and lock timeout, records per outcome,
    deliveries and redeliveries (those with a leader change in between: `failover_redeliveries`),
    acknowledgements per type (confirmed and failed), members per event."""
    out = share_metrics_base(missing, manifest)
    if missing:
        return out
    d = deliveries_with_acks(tables["share_deliveries"], tables["share_acks"], out["lock_timeout_ms"])
    by_outcome = {r["outcome"]: int(r["count"]) for r in
                  record_outcomes(d, tables["audit"], out["delivery_limit"]).groupBy("outcome").count().collect()}
    out["outcomes"] = {k: by_outcome.get(k, 0) for k in OUTCOMES}
    row = tables["share_deliveries"].agg(
        F.count("*").alias("n"), F.countDistinct("partition", "offset").alias("offsets")).collect()[0]
    out["deliveries"] = int(row["n"] or 0)
    out["redeliveries"] = int(row["n"] or 0) - int(row["offsets"] or 0)
    out["failover_redeliveries"] = redeliveries_with_failover(d, leader_changes(tables["cluster_snapshots"])).filter(
        F.col("failover")).count()
    out["acks"] = {r["type"]: {"ok": int(r["ok"] or 0), "failed": int(r["failed"] or 0)} for r in
                   tables["share_acks"].groupBy("type").agg(count_if(F.col("success")).alias("ok"),
                                                            count_if(~F.col("success")).alias("failed")).collect()}
    out["members"] = {r["event"]: int(r["count"]) for r in tables["share_members"].groupBy("event").count().collect()}
    return out
