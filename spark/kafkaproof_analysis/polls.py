"""Poll checks: poll_skips, poll_rewinds and poll_inversion, from each consumer process's reads in order."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .base import REBALANCE_EVENTS
from .columns import lookup_col, small_side
from .context import RunContext


def poll_anomalies(reads: DataFrame, events: DataFrame, audit: DataFrame, ctx: RunContext,
                   broadcast_limit: int = 2_000_000) -> DataFrame:
    """poll_skips, poll_rewinds and poll_inversion: consecutive reads of one process and partition.

    Skips and rewinds pair the reads in offset order inside a poll, so the pair between two polls is
    the earlier poll's highest offset and the later one's lowest (rewinds only between polls); an
    inversion is a pair inside one poll, in the order the client returned it (`poll_seq`), going back.
    """
    proc = ["consumer", "incarnation", "consumer_pid", "partition"]
    w = Window.partitionBy(*proc).orderBy("poll_id", "offset")
    r = (reads.select(*proc, "offset", "value_id", "read_ns", "poll_id", "poll_seq")
         .withColumn("prev_offset", F.lag("offset").over(w))
         .withColumn("prev_read_ns", F.lag("read_ns").over(w))
         .withColumn("prev_poll", F.lag("poll_id").over(w))
         .withColumn("prev_seq", F.lag("poll_seq").over(w)))
    same_poll = F.col("prev_poll") == F.col("poll_id")
    paired = F.col("prev_offset").isNotNull() & (
        (F.col("offset") > F.col("prev_offset") + 1) | ((F.col("offset") <= F.col("prev_offset")) & ~same_poll))
    # A poll whose records, in offset order, are in the client's order too has no inversion; only
    # the others (an offset twice, or poll_seq going back) get a window in the client's order below.
    disordered = same_poll & ((F.col("offset") == F.col("prev_offset")) | (F.col("poll_seq") < F.col("prev_seq")))
    r = (r.withColumn("paired", F.coalesce(paired, F.lit(False)))
         .withColumn("disordered", F.coalesce(disordered, F.lit(False)))
         .filter("paired OR disordered").persist())
    ctx.cached.append(r)  # the gap count below, the disordered polls and the anomaly rows share this window pass
    polls = r.filter("disordered").select(*proc, "poll_id").distinct()
    client = Window.partitionBy(*proc, "poll_id").orderBy("poll_seq", "offset")  # no poll_seq (older runs): offsets
    inversions = (reads.select(*proc, "offset", "value_id", "read_ns", "poll_id", "poll_seq")
                  .join(small_side(polls, broadcast_limit), proc + ["poll_id"], "left_semi")
                  .withColumn("prev_offset", F.lag("offset").over(client))
                  .filter(F.col("offset") <= F.col("prev_offset"))
                  .select(F.lit("poll_inversion").alias("kind"), *proc, "offset", "prev_offset", "read_ns",
                          F.col("read_ns").alias("prev_read_ns"), "value_id",
                          F.format_string(
                              "consumer %s (pid %s) got offset %s after offset %s of partition %s in one poll",
                              F.col("consumer"), F.col("consumer_pid"), F.col("offset"), F.col("prev_offset"),
                              F.col("partition")).alias("detail")))
    cand = r.filter("paired")
    # A gap is excused only when its partition left the process's assignment in between (revoked or
    # lost, then assigned again). Events without `assigned` (runs before the column): any rebalance.
    rebal = events.filter(F.col("event").isin(*REBALANCE_EVENTS)).select(
        F.col("consumer").alias("e_consumer"), F.col("consumer_pid").alias("e_pid"), "ts_ns", "assigned")
    cand = cand.join(F.broadcast(rebal),
                     (F.col("consumer") == F.col("e_consumer")) & (F.col("consumer_pid") == F.col("e_pid"))
                     & (F.col("ts_ns") > F.col("prev_read_ns")) & (F.col("ts_ns") <= F.col("read_ns"))
                     & (F.col("assigned").isNull() | ~F.array_contains("assigned", F.col("partition"))),
                     "left_anti")
    key = proc + ["poll_id", "offset"]
    # A read_committed consumer must see exactly the committed records, a
    # read_uncommitted one every record: gaps over markers (or aborted records) are fine.
    rc = lookup_col(ctx.consumer_read_committed, "boolean", F.col("consumer"), True)
    gaps = (cand.filter(F.col("offset") > F.col("prev_offset") + 1)
            .select(*key, rc.alias("rc"),
                    F.explode(F.sequence(F.col("prev_offset") + 1, F.col("offset") - 1)).alias("gap_offset")))
    existing = audit.select("partition", F.col("offset").alias("gap_offset"),
                            (F.col("isolation") == "read_committed").alias("rc"))
    # The gap table is usually tiny (transaction markers): broadcast it rather than shuffle the log.
    real = (existing.join(small_side(gaps, broadcast_limit), ["partition", "gap_offset", "rc"], "inner")
            .groupBy(*key).agg(F.count("*").alias("skipped")))
    skips = cand.join(real, key, "inner").select(
        F.lit("poll_skips").alias("kind"), *proc, "offset", "prev_offset", "read_ns", "prev_read_ns", "value_id",
        F.format_string("consumer %s (pid %s) jumped from offset %s to %s in partition %s, skipping %s records",
                        F.col("consumer"), F.col("consumer_pid"), F.col("prev_offset"), F.col("offset"),
                        F.col("partition"), F.col("skipped")).alias("detail"))
    rewinds = cand.filter(F.col("offset") <= F.col("prev_offset")).select(
        F.lit("poll_rewinds").alias("kind"), *proc, "offset", "prev_offset", "read_ns", "prev_read_ns", "value_id",
        F.format_string("consumer %s (pid %s) went back from offset %s to %s in partition %s while it stayed assigned",
                        F.col("consumer"), F.col("consumer_pid"), F.col("prev_offset"), F.col("offset"),
                        F.col("partition")).alias("detail"))
    group_name = lookup_col({i: ctx.groups[g] for i, g in ctx.consumer_group.items()}, "string",
                             F.col("consumer"), ctx.groups[0])
    return skips.unionByName(rewinds).unionByName(inversions).select(
        "kind", "value_id", F.when(F.col("value_id") >= 0, F.shiftright("value_id", 32)).cast("int").alias("producer"),
        "partition", "offset", F.array("prev_offset", "offset").alias("offsets"),
        F.lit(None).cast("array<bigint>").alias("value_ids"), "consumer", "consumer_pid", group_name.alias("group"),
        F.col("prev_read_ns").alias("t_start_ns"), F.col("read_ns").alias("t_end_ns"), "detail")
