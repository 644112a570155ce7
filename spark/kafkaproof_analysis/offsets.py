"""Offset checks: inconsistent_offsets, ack_offset_mismatch and redeliveries, at the suspect offsets only."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .columns import count_if, lookup_col, small_side
from .context import RunContext
from .values import broker_offset


def suspect_offsets(rows: DataFrame, values: DataFrame, ctx: RunContext, broadcast_limit: int) -> DataFrame:
    """The (partition, offset) pairs where a row of a position-suspect value or a foreign record (value
    id -1) sits, from `rows` (partition, offset, value_id: acks, the full log and the reads); persisted."""
    suspects = small_side(values.filter(F.col("position_suspect")).select("value_id"), broadcast_limit)
    positions = (rows.join(suspects, "value_id", "left_semi")
                 .unionByName(rows.filter(F.col("value_id") == -1))
                 .select("partition", "offset").distinct().persist())
    ctx.cached.append(positions)
    return positions


def offset_anomalies(sends: DataFrame, audit: DataFrame, reads: DataFrame, ctx: RunContext,
                     values: DataFrame | None = None, broadcast_limit: int = 2_000_000) -> DataFrame:
    """inconsistent_offsets, ack_offset_mismatch and redeliveries, from one (partition, offset) aggregation.

    With `values` (classify_values' output), only the offsets `suspect_offsets` names are aggregated,
    every row there included: the same result (docs/analysis.md, "Offset checks") without shuffling
    every ack, record and read. Without it, every offset is (the reference the tests compare with)."""
    group = lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
    cols = ["partition", "offset", "value_id", "src", "grp", "t0", "t1"]
    acked = sends.withColumn("offset", broker_offset(ctx))
    acks = acked.filter((F.col("outcome") == "ok") & (F.col("offset") >= 0) & (F.col("partition") >= 0)).select(
        "partition", "offset", "value_id", F.lit(0).alias("src"), F.lit(None).cast("int").alias("grp"),
        F.col("send_ns").alias("t0"), F.coalesce("complete_ns", "send_ns").alias("t1"))
    lu = audit.filter(F.col("isolation") == "read_uncommitted").select(
        "partition", "offset", "value_id", F.lit(1).alias("src"), F.lit(None).cast("int").alias("grp"),
        F.lit(None).cast("long").alias("t0"), F.lit(None).cast("long").alias("t1"))
    rd = reads.select("partition", "offset", "value_id", F.lit(2).alias("src"), group.alias("grp"),
                      F.col("read_ns").alias("t0"), F.col("read_ns").alias("t1"))
    obs = acks.select(cols).unionByName(lu.select(cols)).unionByName(rd.select(cols))
    if values is not None:
        positions = suspect_offsets(obs.select("partition", "offset", "value_id"), values, ctx, broadcast_limit)
        obs = obs.join(small_side(positions, broadcast_limit), ["partition", "offset"], "left_semi")
    # Hashed by offset first, as in value_observations: an offset has about three observations.
    obs = obs.repartition("partition", "offset")
    src, vid = F.col("src"), F.col("value_id")
    read_cols = [count_if((src == 2) & (F.col("grp") == g)).alias(f"reads_{g}") for g in range(len(ctx.groups))]
    agg = obs.groupBy("partition", "offset").agg(
        F.min(vid).alias("vmin"), F.max(vid).alias("vmax"),
        F.min(F.when(src == 0, vid)).alias("ack_min"), F.max(F.when(src == 0, vid)).alias("ack_max"),
        # Every distinct value, not just the extremes: three or more can meet at one offset (one per
        # unclean election), and only suspect offsets are aggregated, so the sets stay small.
        F.array_sort(F.collect_set(F.when(src == 0, vid))).alias("ack_vids"),
        F.array_sort(F.collect_set(vid)).alias("vids"),
        count_if(src == 0).alias("n_ack"),
        F.max(F.when(src == 1, vid)).alias("log_vid"), count_if(src == 1).alias("n_log"),
        F.min("t0").alias("t_start_ns"), F.min("t1").alias("t_end_ns"),
        *read_cols,
    )
    max_reads = F.greatest(*[F.col(f"reads_{g}") for g in range(len(ctx.groups))], F.lit(0))
    suspicious = agg.filter(
        (F.col("vmin") != F.col("vmax"))
        | ((F.col("n_ack") > 0) & ((F.col("n_log") == 0) | (F.col("log_vid") != F.col("ack_min"))
                                   | (F.col("ack_min") != F.col("ack_max"))))
        | (max_reads > 1)).persist()
    ctx.cached.append(suspicious)

    # An acked offset with no record is a mismatch only inside a completely drained log
    # [low, high) of the manifest (below low: deleted by retention; beyond high: unseen).
    low = lookup_col({p.partition: p.low for p in ctx.partitions if p.low is not None}, "bigint", F.col("partition"), 0)
    high = lookup_col({p.partition: p.high for p in ctx.partitions if p.high is not None}, "bigint",
                       F.col("partition"), -1)
    complete = lookup_col({p.partition: p.complete for p in ctx.partitions}, "boolean", F.col("partition"), False)
    ack_rows = suspicious.filter(F.col("n_ack") > 0).withColumn("ack_vid", F.explode("ack_vids"))
    mismatch = ack_rows.filter(
        ((F.col("n_log") > 0) & (F.col("log_vid") != F.col("ack_vid")))
        | ((F.col("n_log") == 0) & complete & (F.col("offset") >= low) & (F.col("offset") < high)))
    mismatch = mismatch.select(
        F.lit("ack_offset_mismatch").alias("kind"), F.col("ack_vid").alias("value_id"), "partition", "offset",
        F.array("offset").alias("offsets"),
        F.when(F.col("n_log") > 0, F.array("ack_vid", "log_vid")).otherwise(F.array("ack_vid")).alias("value_ids"),
        F.when(F.col("n_log") > 0,
               F.format_string("acked value %s at partition %s offset %s, but the log holds value %s there",
                               F.col("ack_vid"), F.col("partition"), F.col("offset"), F.col("log_vid")))
         .otherwise(F.format_string("acked value %s at partition %s offset %s, but the drained log [%s, %s) has no record there",
                                    F.col("ack_vid"), F.col("partition"), F.col("offset"), low, high)).alias("detail"),
        F.lit(None).cast("string").alias("group"), "t_start_ns", "t_end_ns")

    # Every distinct value among the acks, the log and the reads there.
    seen = F.col("vids")
    incons = suspicious.filter(F.col("vmin") != F.col("vmax")).select(
        F.lit("inconsistent_offsets").alias("kind"), F.coalesce("ack_min", "log_vid", "vmin").alias("value_id"),
        "partition", "offset", F.array("offset").alias("offsets"), seen.alias("value_ids"),
        F.format_string("partition %s offset %s holds different values across acks, reads and the log: %s",
                        F.col("partition"), F.col("offset"), F.array_join(seen.cast("array<string>"), ", ")).alias("detail"),
        F.lit(None).cast("string").alias("group"), "t_start_ns", "t_end_ns")

    out = mismatch.unionByName(incons)
    for g, name in enumerate(ctx.groups):
        out = out.unionByName(suspicious.filter(F.col(f"reads_{g}") > 1).select(
            F.lit("redeliveries").alias("kind"), F.coalesce("log_vid", "vmin").alias("value_id"),
            "partition", "offset", F.array("offset").alias("offsets"),
            F.lit(None).cast("array<bigint>").alias("value_ids"),
            F.format_string("offset read %s times by consumer group %s", F.col(f"reads_{g}"), F.lit(name)).alias("detail"),
            F.lit(name).alias("group"), "t_start_ns", "t_end_ns"))
    return out.select(
        "kind", "value_id", F.when(F.col("value_id") >= 0, F.shiftright("value_id", 32)).cast("int").alias("producer"),
        F.col("partition").cast("int").alias("partition"), "offset", "offsets", "value_ids",
        F.lit(None).cast("int").alias("consumer"), F.lit(None).cast("int").alias("consumer_pid"),
        "group", "t_start_ns", F.greatest("t_start_ns", "t_end_ns").alias("t_end_ns"), "detail")
