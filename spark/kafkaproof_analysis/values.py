"""Value-level checks: where each value sits in the log and who read it, its anomaly flags and rows, reordering."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .base import NS_PER_S, VALUE_FLAGS
from .columns import count_if, lookup_col
from .context import RunContext


def value_observations(audit: DataFrame, reads: DataFrame, ctx: RunContext) -> DataFrame:
    """Per value id: where it sits in the final log and who read it (one shuffle)."""
    cols = ["value_id", "src", "partition", "offset", "gbit", "rc", "read_ns"]
    lc = audit.filter((F.col("isolation") == "read_committed") & (F.col("value_id") != -1)).select(
        "value_id", F.lit(1).alias("src"), "partition", "offset",
        F.lit(None).cast("long").alias("gbit"), F.lit(None).cast("int").alias("rc"), F.lit(None).cast("long").alias("read_ns"))
    group = lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
    rc = lookup_col(ctx.consumer_read_committed, "boolean", F.col("consumer"), True)
    rd = reads.filter(F.col("value_id") != -1).select(
        "value_id", F.lit(3).alias("src"), "partition", "offset",
        F.pow(F.lit(2), group).cast("long").alias("gbit"), rc.cast("int").alias("rc"), "read_ns")
    # The uncommitted log is left out on purpose: only aborted records differ from the
    # committed one, and no value-level check needs them (offset checks use it).
    # Hashed by value id first: a value has about two observations, so the partial aggregation Spark
    # would otherwise run before the shuffle reduces nothing and spilled (10M values: 19 s of 47).
    obs = lc.select(cols).unionByName(rd.select(cols)).repartition("value_id")
    src = F.col("src")
    return obs.groupBy("value_id").agg(
        count_if(src == 1).alias("log_count"),
        F.min(F.when(src == 1, F.col("partition"))).alias("log_partition"),
        F.min(F.when(src == 1, F.col("offset"))).alias("log_offset"),
        F.max(F.when(src == 1, F.col("offset"))).alias("log_offset_max"),
        count_if(src == 3).alias("read_count"),
        F.min(F.when(src == 3, F.col("partition"))).alias("read_partition_min"),
        F.max(F.when(src == 3, F.col("partition"))).alias("read_partition_max"),
        F.min(F.when(src == 3, F.col("offset"))).alias("read_offset_min"),
        F.max(F.when(src == 3, F.col("offset"))).alias("read_offset_max"),
        count_if((src == 3) & (F.col("rc") == 1)).alias("read_rc_count"),
        F.bit_or(F.col("gbit")).alias("groups_mask"),
        F.min(F.when(src == 3, F.col("read_ns"))).alias("first_read_ns"),
        # When the last group to get the value first read it (the application-delivery claim).
        F.greatest(*[F.min(F.when((src == 3) & (F.col("gbit") == (1 << g)), F.col("read_ns")))
                     for g in range(len(ctx.groups))], F.lit(None).cast("long")).alias("delivered_ns"),
    )


def broker_offset(ctx: RunContext) -> Column:
    """`offset` of a send, null where its producer's reports carry no broker-assigned offset (acks=0)."""
    from_broker = lookup_col(ctx.producer_broker_offsets, "boolean", F.col("producer"), True)
    return F.when(from_broker, F.col("offset"))


def classify_values(sends: DataFrame, obs: DataFrame, ctx: RunContext, last_heal_ns: int | None = None) -> DataFrame:
    """values.parquet: one row per value id seen anywhere, with its anomaly flags."""
    s = sends.select(
        "value_id", "producer", "seq", "key", "partition", "outcome", broker_offset(ctx).alias("ack_offset"),
        "error_name", "txn_id", "txn_outcome", "intended_ns", "send_ns", "complete_ns")
    # Hash join: both sides are already hashed by value_id; sorting them for a merge join costs more.
    v = s.hint("shuffle_hash").join(obs, "value_id", "full_outer")
    outcome = F.col("outcome")
    log_count = F.coalesce(F.col("log_count"), F.lit(0))
    in_log = log_count > 0
    acks = F.when(F.col("producer").isNotNull(),
                  lookup_col(ctx.producer_acks, "int", F.col("producer"), ctx.default_acks))
    expected = (outcome == "ok") & (F.col("txn_id").isNull() | (F.col("txn_outcome") == "commit"))
    complete = {p.partition: p.complete for p in ctx.partitions}
    high = {p.partition: p.high for p in ctx.partitions if p.high is not None}
    part = F.col("partition")
    known_part = part.isNotNull() & (part >= 0)
    part_complete = lookup_col(complete, "boolean", part, False)
    below_high = F.col("ack_offset").isNull() | (F.col("ack_offset") < 0) | (
        F.col("ack_offset") < lookup_col(high, "bigint", part, -1))
    reachable = F.when(known_part, part_complete & below_high).otherwise(F.lit(ctx.all_complete))
    read_any = F.coalesce(F.col("groups_mask"), F.lit(0))

    v = (v.withColumn("acks", acks)
         .withColumn("sent", outcome.isNotNull())
         .withColumn("expected", F.coalesce(expected, F.lit(False)))
         .withColumn("reachable", reachable)
         .withColumn("log_count", log_count)
         .withColumn("read_count", F.coalesce(F.col("read_count"), F.lit(0)))
         .withColumn("read_rc_count", F.coalesce(F.col("read_rc_count"), F.lit(0)))
         .withColumn("groups_mask", read_any))
    missing = F.col("expected") & ~in_log
    aborted = F.coalesce(F.col("txn_outcome") == "abort", F.lit(False))
    failed = F.coalesce(outcome == "fail", F.lit(False))
    v = (v.withColumn("unseen", missing & ~F.col("reachable"))
         .withColumn("lost", missing & F.col("reachable") & (F.col("acks") != 0))
         .withColumn("lost_unconfirmed", missing & F.col("reachable") & (F.col("acks") == 0))
         .withColumn("duplicate", log_count > 1)
         .withColumn("observed_duplicate", observed_duplicate())
         .withColumn("not_delivered", F.lit(ctx.has_consumers) & in_log & (read_any != F.lit(ctx.groups_mask)))
         # Definitely not written, yet seen anywhere; or rolled back, yet committed or read read_committed.
         .withColumn("aborted_read", (failed & (in_log | (F.col("read_count") > 0)))
                     | (aborted & (in_log | (F.col("read_rc_count") > 0))))
         # Rolled back, and a read_uncommitted consumer processed it.
         .withColumn("dirty_read", aborted & (F.col("read_count") > F.col("read_rc_count")))
         .withColumn("indefinite_landed", F.coalesce(outcome == "indefinite", F.lit(False)) & in_log)
         .withColumn("unknown_value", ~F.col("sent")))
    if ctx.delivery_within_s is None:
        v = v.withColumn("delivery_deadline_ns", F.lit(None).cast("long")).withColumn("undelivered", F.lit(False))
    else:
        # Attempted (any outcome) and not read by every group by max(intended, last heal) + within_s.
        deadline = (F.greatest(F.col("intended_ns"), F.lit(last_heal_ns or 0).cast("long"))
                    + F.lit(int(ctx.delivery_within_s * NS_PER_S)))
        delivered = (read_any == F.lit(ctx.groups_mask)) & F.coalesce(F.col("delivered_ns") <= deadline, F.lit(False))
        v = (v.withColumn("delivery_deadline_ns", deadline)
             .withColumn("undelivered", F.col("sent") & ~delivered))
    # claims.processed_once: some group read the value more than once (each group in the mask read it at least once),
    # at any offsets: a redelivery or a copy in the log, processed again.
    v = v.withColumn("reprocessed", F.lit(ctx.processed_once) & (F.col("read_count") > F.bit_count(F.col("groups_mask"))))
    v = v.withColumn("position_suspect", position_suspect())
    for c in ("lost", "lost_unconfirmed", "unseen", "duplicate", "observed_duplicate", "not_delivered", "aborted_read",
              "dirty_read", "indefinite_landed", "unknown_value", "undelivered", "reprocessed", "position_suspect"):
        v = v.withColumn(c, F.coalesce(F.col(c), F.lit(False)))
    # Where an observed duplicate was seen (null for every other value: a sparse column).
    seen_at = F.array_sort(F.array_distinct(F.array_compact(F.array(
        F.when((F.col("outcome") == "ok") & (F.col("ack_offset") >= 0), F.col("ack_offset")), F.col("log_offset"),
        F.col("read_offset_min"), F.col("read_offset_max")))))
    v = v.withColumn("observed_offsets", F.when(F.col("observed_duplicate"), seen_at))
    return v.select(
        "value_id", "producer", "seq", "key", "partition", "outcome", "ack_offset", "error_name", "acks",
        "txn_id", "txn_outcome", "intended_ns", "send_ns", "complete_ns",
        "log_count", "log_partition", "log_offset", "log_offset_max",
        "read_count", "read_rc_count", "groups_mask", "first_read_ns", "delivered_ns", "delivery_deadline_ns",
        "sent", "expected", "reachable",
        "lost", "lost_unconfirmed", "unseen", "duplicate", "observed_duplicate", "not_delivered", "aborted_read",
        "dirty_read", "indefinite_landed", "unknown_value", "undelivered", "reprocessed", "position_suspect",
        "observed_offsets",
    )


def observed_duplicate() -> Column:
    """Over classify_values' columns: the value was seen at two or more positions (partition, offset) across
    its ack, its reads and the committed log, yet is at most once in that log (else it is a `duplicate`):
    a copy an ack or a consumer saw that the final log no longer holds (e.g. truncated by an unclean
    election), or a misplaced ack or read. Jepsen's duplicate counts a value at two offsets of sends and polls."""
    def apart(p1: Column, o1: Column, p2: Column, o2: Column) -> Column:
        return (p1 != p2) | (o1 != o2)

    acked = (F.col("outcome") == "ok") & (F.col("ack_offset") >= 0) & (F.col("partition") >= 0)
    logged = F.col("log_count") == 1
    read = F.col("read_count") > 0
    terms = [
        read & apart(F.col("read_partition_min"), F.col("read_offset_min"),
                     F.col("read_partition_max"), F.col("read_offset_max")),
        acked & logged & apart(F.col("partition"), F.col("ack_offset"), F.col("log_partition"), F.col("log_offset")),
        acked & read & apart(F.col("partition"), F.col("ack_offset"),
                             F.col("read_partition_min"), F.col("read_offset_min")),
        logged & read & apart(F.col("log_partition"), F.col("log_offset"),
                              F.col("read_partition_min"), F.col("read_offset_min")),
    ]
    return (F.col("log_count") <= 1) & F.greatest(*[F.coalesce(t, F.lit(False)) for t in terms])


def position_suspect() -> Column:
    """Over classify_values' columns: the value has an ack or a read somewhere other than its one
    position in the committed log, or a group read it more than once. Only offsets where such a
    value, or a foreign record, sits can be offset anomalies (docs/analysis.md, "Offset checks")."""
    def at_log_position(partition: Column, offset: Column) -> Column:
        return (F.col("log_count") == 1) & (partition == F.col("log_partition")) & (offset == F.col("log_offset"))

    acked = (F.col("outcome") == "ok") & (F.col("ack_offset") >= 0) & (F.col("partition") >= 0)
    ack_elsewhere = acked & ~at_log_position(F.col("partition"), F.col("ack_offset"))
    read_elsewhere = (F.col("read_count") > 0) & ~(
        at_log_position(F.col("read_partition_min"), F.col("read_offset_min"))
        & at_log_position(F.col("read_partition_max"), F.col("read_offset_max")))
    read_again = F.col("read_count") > F.bit_count(F.col("groups_mask"))
    return F.coalesce(ack_elsewhere, F.lit(False)) | F.coalesce(read_elsewhere, F.lit(False)) | read_again


def value_anomalies(values: DataFrame, ctx: RunContext) -> DataFrame:
    """One anomaly row per flagged value (value-level kinds)."""
    high = {p.partition: p.high for p in ctx.partitions if p.high is not None}
    where = F.coalesce(F.col("log_partition"), F.col("partition"))
    offset = F.coalesce(F.col("log_offset"), F.col("ack_offset"))
    details: dict[str, Column] = {
        "lost": F.format_string("acked (acks=%s) at partition %s offset %s; absent from the committed log",
                                F.col("acks"), F.col("partition"), F.col("ack_offset")),
        "lost_unconfirmed": F.format_string("acks=0 'ok' (no broker acknowledgement) at partition %s; absent from the log",
                                            F.col("partition")),
        "unseen": F.when(
            F.col("ack_offset").isNotNull() & (F.col("ack_offset") >= lookup_col(high, "bigint", F.col("partition"), -1))
            & F.col("partition").isNotNull() & (F.col("partition") >= 0)
            & (lookup_col(high, "bigint", F.col("partition"), -1) >= 0),
            F.format_string("acked at partition %s offset %s >= high watermark %s: the drain never reached it",
                            F.col("partition"), F.col("ack_offset"), lookup_col(high, "bigint", F.col("partition"), -1)),
        ).otherwise(F.format_string("acked at partition %s; drain of that partition incomplete", F.col("partition"))),
        "not_delivered": F.format_string("in the committed log at partition %s offset %s; never read by the group(s) (groups_mask=%s)",
                                         F.col("log_partition"), F.col("log_offset"), F.col("groups_mask")),
        "duplicates": F.format_string("%s copies in the committed log of partition %s, offsets %s..%s",
                                      F.col("log_count"), F.col("log_partition"), F.col("log_offset"),
                                      F.col("log_offset_max")),
        "observed_duplicates": F.format_string(
            "observed at offsets %s of partition %s across its ack (%s), its reads and the committed log (%s); "
            "the final log holds %s copy", F.array_join(F.col("observed_offsets").cast("array<string>"), ", "),
            where, F.coalesce(F.col("ack_offset").cast("string"), F.lit("none")),
            F.coalesce(F.col("log_offset").cast("string"), F.lit("none")), F.col("log_count")),
        "aborted_reads": F.format_string("send outcome=%s txn_outcome=%s, yet in the committed log %s times and read "
                                         "%s times (%s of them read_committed)", F.col("outcome"),
                                         F.col("txn_outcome"), F.col("log_count"), F.col("read_count"),
                                         F.col("read_rc_count")),
        "dirty_reads": F.format_string("value of aborted transaction %s read %s times by read_uncommitted consumers",
                                       F.col("txn_id"), F.col("read_count") - F.col("read_rc_count")),
        "undelivered_attempts": F.format_string(
            "attempted (send outcome %s%s) and %s", F.coalesce(F.col("outcome"), F.lit("unknown")),
            F.when(F.col("error_name").isNotNull(), F.concat(F.lit(", "), F.col("error_name"))).otherwise(F.lit("")),
            F.when(F.col("groups_mask") == F.lit(ctx.groups_mask),
                   F.lit("read only after the claim's deadline")).otherwise(F.lit("never read by its consumers"))),
        "reprocessed": F.format_string("processed %s times by %s consumer group(s); %s copies in the committed log",
                                       F.col("read_count"), F.bit_count(F.col("groups_mask")), F.col("log_count")),
        "indefinite_landed": F.format_string("indefinite send (%s) is in the log at partition %s offset %s",
                                             F.col("error_name"), F.col("log_partition"), F.col("log_offset")),
        "unknown_values": F.format_string("never sent per sends.parquet; %s copies in the committed log, %s reads",
                                          F.col("log_count"), F.col("read_count")),
    }
    t_start = F.coalesce(F.col("send_ns"), F.col("first_read_ns"))
    t_end = F.coalesce(F.col("complete_ns"), F.col("send_ns"), F.col("first_read_ns"))
    # One scan: each flagged value becomes one row per kind it is flagged with.
    flagged = values.filter(F.greatest(*[F.col(f) for f in VALUE_FLAGS.values()]))
    kinds = F.array_compact(F.array(*[F.when(F.col(f), F.lit(k)) for k, f in VALUE_FLAGS.items()]))
    flagged = flagged.withColumn("kind", F.explode(kinds))
    detail = F.lit(None).cast("string")
    for kind, expr in details.items():
        detail = F.when(F.col("kind") == kind, expr).otherwise(detail)
    is_dup = F.col("kind") == "duplicates"
    return flagged.select(
        "kind", "value_id", "producer", where.cast("int").alias("partition"), offset.alias("offset"),
        F.when(is_dup, F.array(F.col("log_offset"), F.col("log_offset_max")))
         .when(F.col("kind") == "observed_duplicates", F.col("observed_offsets"))
         .otherwise(F.when(offset.isNotNull(), F.array(offset))).alias("offsets"),
        F.lit(None).cast("array<bigint>").alias("value_ids"),
        F.lit(None).cast("int").alias("consumer"), F.lit(None).cast("int").alias("consumer_pid"),
        F.lit(None).cast("string").alias("group"),
        t_start.alias("t_start_ns"), t_end.alias("t_end_ns"), detail.alias("detail"))


def reorder_anomalies(values: DataFrame) -> DataFrame:
    """reordering: an acked value whose committed-log offset is below that of the previous
    acked value (by seq) of the same producer in the same partition (a narrow window pass)."""
    acked = values.filter((F.col("outcome") == "ok") & (F.col("log_count") > 0)).select(
        "value_id", "producer", "seq", F.col("log_partition").alias("partition"), F.col("log_offset").alias("offset"),
        "send_ns", "complete_ns")
    w = Window.partitionBy("producer", "partition").orderBy("seq")
    r = (acked.withColumn("prev_offset", F.lag("offset").over(w))
         .withColumn("prev_value_id", F.lag("value_id").over(w))
         .withColumn("prev_seq", F.lag("seq").over(w))
         .filter(F.col("offset") < F.col("prev_offset")))
    return r.select(
        F.lit("reordering").alias("kind"), "value_id", "producer", "partition", "offset",
        F.array("prev_offset", "offset").alias("offsets"), F.array("prev_value_id", "value_id").alias("value_ids"),
        F.lit(None).cast("int").alias("consumer"), F.lit(None).cast("int").alias("consumer_pid"),
        F.lit(None).cast("string").alias("group"), F.col("send_ns").alias("t_start_ns"),
        F.coalesce("complete_ns", "send_ns").alias("t_end_ns"),
        F.format_string("seq %s at offset %s, below offset %s of the producer's previous acked value %s (seq %s)",
                        F.col("seq"), F.col("offset"), F.col("prev_offset"), F.col("prev_value_id"),
                        F.col("prev_seq")).alias("detail"))
