"""Commit consistency (issue 45): the group's commits and each process's reads, judged against each other.

A *segment* is one process's uninterrupted ownership of a partition, seen through its reads: it starts at
the process's first read of the partition, and again at the first read after a rebalance event of that
process whose `assigned` lacks the partition (revoked or lost in between; events without `assigned`, from
runs before the column, start a segment at any rebalance). docs/analysis.md defines every kind.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .base import REBALANCE_EVENTS
from .columns import lookup_col
from .context import RunContext

COMMIT_KINDS = ("rewind_below_commit", "skip_above_commit", "commit_beyond_read", "commit_regression",
                "double_ownership")
PROC = ["consumer", "consumer_pid", "incarnation"]


def _group(ctx: RunContext) -> Column:
    return lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0).alias("g")


def _rc(ctx: RunContext) -> Column:
    return lookup_col(ctx.consumer_read_committed, "boolean", F.col("consumer"), True).alias("rc")


def successful_commits(events: DataFrame, ctx: RunContext) -> DataFrame:
    """One row per partition of each successful commit: g, consumer, consumer_pid, incarnation, partition,
    committed (the next offset to read, Kafka's convention), ts_ns. Offsets < 0 (none stored) are no commit."""
    return (events.filter((F.col("event") == "commit") & F.col("success") & F.col("offsets").isNotNull())
            .select(_group(ctx), *PROC, "ts_ns", F.arrays_zip("partitions", "offsets").alias("po"))
            .select("g", *PROC, "ts_ns", F.explode("po").alias("po"))
            .select("g", *PROC, "ts_ns", F.col("po.partitions").alias("partition"),
                    F.col("po.offsets").alias("committed"))
            .filter(F.col("committed") >= 0))


def ownership_segments(reads: DataFrame, events: DataFrame, ctx: RunContext) -> DataFrame:
    """Per (process, partition, segment): g, rc, first_offset, first_value, first_ns, last_offset, last_ns."""
    key = PROC + ["partition"]
    w = Window.partitionBy(*key).orderBy("poll_id", "offset")
    r = (reads.select(*key, "offset", "value_id", "read_ns", "poll_id")
         .withColumn("prev_read_ns", F.lag("read_ns").over(w)))
    rebal = events.filter(F.col("event").isin(*REBALANCE_EVENTS)).select(
        F.col("consumer").alias("e_consumer"), F.col("consumer_pid").alias("e_pid"),
        F.col("incarnation").alias("e_inc"), "ts_ns", "assigned")
    moved = (r.filter(F.col("prev_read_ns").isNotNull())
             .join(F.broadcast(rebal),
                   (F.col("consumer") == F.col("e_consumer")) & (F.col("consumer_pid") == F.col("e_pid"))
                   & (F.col("incarnation") == F.col("e_inc"))
                   & (F.col("ts_ns") > F.col("prev_read_ns")) & (F.col("ts_ns") <= F.col("read_ns"))
                   & (F.col("assigned").isNull() | ~F.array_contains("assigned", F.col("partition"))), "left_semi")
             .select(*key, "poll_id", "offset", F.lit(1).alias("moved")).distinct())
    r = (r.join(moved, key + ["poll_id", "offset"], "left")
         .withColumn("start", F.when(F.col("prev_read_ns").isNull() | F.col("moved").isNotNull(), 1).otherwise(0))
         .withColumn("seg", F.sum("start").over(w.rowsBetween(Window.unboundedPreceding, 0))))
    first = F.struct("poll_id", "offset", "read_ns", "value_id")
    return (r.groupBy(*key, "seg")
            .agg(F.min(first).alias("f"), F.max("offset").alias("last_offset"), F.max("read_ns").alias("last_ns"))
            .select(*key, "seg", _group(ctx), _rc(ctx), F.col("f.offset").alias("first_offset"),
                    F.col("f.value_id").alias("first_value"), F.col("f.read_ns").alias("first_ns"),
                    "last_offset", "last_ns"))


def _log_view(audit: DataFrame) -> DataFrame:
    """(partition, x, rc): the records a read_committed (rc) or read_uncommitted consumer should see."""
    return audit.select("partition", F.col("offset").alias("x"), (F.col("isolation") == "read_committed").alias("rc"))


def _group_reads(reads: DataFrame, ctx: RunContext) -> DataFrame:
    return reads.select(_group(ctx), "partition", F.col("offset").alias("x"), F.col("read_ns").alias("rn"))


def _unread_between(cands: DataFrame, audit: DataFrame, reads: DataFrame, ctx: RunContext,
                    by_time: bool) -> DataFrame:
    """`cands` (cid: a key, g, rc, partition, lo, hi, t) with the count `unread` of log records x in [lo, hi) of the
    candidate's view that group g never read (by_time: by t). Candidates are few: a range join is fine."""
    log = _log_view(audit)
    inside = (cands.join(log, ["partition", "rc"]).filter((F.col("x") >= F.col("lo")) & (F.col("x") < F.col("hi")))
              .select("cid", "g", "partition", "x", "t"))
    seen = _group_reads(reads, ctx)
    cond = [inside["g"] == seen["g"], inside["partition"] == seen["partition"], inside["x"] == seen["x"]]
    if by_time:
        cond.append(seen["rn"] <= inside["t"])
    unread = inside.join(seen, cond, "left_anti").groupBy("cid").agg(F.count("*").alias("unread"))
    return cands.join(unread, "cid", "inner")


def start_anomalies(segments: DataFrame, commits: DataFrame, audit: DataFrame, reads: DataFrame,
                    ctx: RunContext) -> DataFrame:
    """rewind_below_commit and skip_above_commit: each segment's first read against the group's last successful
    commit of the partition before it (no commit before it: not judged)."""
    c = commits.select("g", "partition", F.col("ts_ns").alias("c_ts"), "committed")
    last = (segments.join(c, ["g", "partition"]).filter(F.col("c_ts") < F.col("first_ns"))
            .groupBy(*PROC, "partition", "seg")
            .agg(F.max(F.struct("c_ts", "committed")).alias("lc")))
    s = (segments.join(last, PROC + ["partition", "seg"])
         .withColumn("c", F.col("lc.committed")).withColumn("c_ts", F.col("lc.c_ts")))
    rewinds = s.filter(F.col("first_offset") < F.col("c")).withColumn("kind", F.lit("rewind_below_commit")) \
        .withColumn("n", F.col("c") - F.col("first_offset"))
    above = (s.filter(F.col("first_offset") > F.col("c"))
             .withColumn("cid", F.struct(*PROC, "partition", "seg"))
             .withColumn("lo", F.col("c")).withColumn("hi", F.col("first_offset")).withColumn("t", F.col("first_ns")))
    skips = (_unread_between(above, audit, reads, ctx, by_time=False)
             .withColumn("kind", F.lit("skip_above_commit")).withColumn("n", F.col("unread")))
    cols = ["kind", *PROC, "g", "partition", "first_offset", "first_value", "first_ns", "c", "c_ts", "n"]
    both = rewinds.select(*cols).unionByName(skips.select(*cols))
    detail = F.when(
        F.col("kind") == "rewind_below_commit",
        F.format_string("consumer %s (pid %s) started partition %s at offset %s, %s below the group's last "
                        "commit %s: records the group had committed past are delivered again",
                        "consumer", "consumer_pid", "partition", "first_offset", "n", "c")
    ).otherwise(
        F.format_string("consumer %s (pid %s) started partition %s at offset %s, above the group's last commit %s: "
                        "%s records in between were never read by the group",
                        "consumer", "consumer_pid", "partition", "first_offset", "c", "n"))
    return both.select("kind", F.col("first_value").alias("value_id"), *PROC, "g", "partition",
                       F.col("first_offset").alias("offset"), F.array("c", "first_offset").alias("offsets"),
                       F.col("c_ts").alias("t_start_ns"), F.col("first_ns").alias("t_end_ns"), detail.alias("detail"))


def beyond_read_anomalies(commits: DataFrame, audit: DataFrame, reads: DataFrame, ctx: RunContext) -> DataFrame:
    """commit_beyond_read: a successful commit of offset c above the committing process's highest read + 1 (at
    any time: a client stores the offsets of a batch as it returns it, and the worker records the batch after
    the poll call that may have run the commit's callback), with a record of the committer's view between that
    read and c that the group had not read by the commit. Commits past transaction markers are candidates
    that find no such record."""
    own = reads.groupBy(*PROC, "partition").agg(F.max("offset").alias("own_max"))
    cands = (commits.join(own, PROC + ["partition"], "left")
             .filter(F.col("own_max").isNull() | (F.col("committed") > F.col("own_max") + 1))
             .select("*", _rc(ctx)).withColumn("cid", F.struct(*PROC, "partition", "ts_ns", "committed"))
             .withColumn("lo", F.coalesce(F.col("own_max") + 1, F.lit(0).cast("long")))
             .withColumn("hi", F.col("committed"))
             .withColumn("t", F.col("ts_ns")))
    found = _unread_between(cands, audit, reads, ctx, by_time=True)
    return found.select(
        F.lit("commit_beyond_read").alias("kind"), F.lit(None).cast("bigint").alias("value_id"), *PROC, "g",
        "partition", F.col("committed").alias("offset"), F.array("committed").alias("offsets"),
        F.col("ts_ns").alias("t_start_ns"), F.col("ts_ns").alias("t_end_ns"),
        F.format_string("consumer %s (pid %s) committed offset %s of partition %s while %s records below it were "
                        "not read by the group yet", "consumer", "consumer_pid", "committed", "partition",
                        "unread").alias("detail"))


def regression_anomalies(commits: DataFrame) -> DataFrame:
    """commit_regression: a group's successful commit of a partition below its previous successful one."""
    w = Window.partitionBy("g", "partition").orderBy("ts_ns", "consumer_pid")
    c = (commits.withColumn("prev", F.lag("committed").over(w)).withColumn("prev_ts", F.lag("ts_ns").over(w))
         .filter(F.col("committed") < F.col("prev")))
    return c.select(
        F.lit("commit_regression").alias("kind"), F.lit(None).cast("bigint").alias("value_id"), *PROC, "g",
        "partition", F.col("committed").alias("offset"), F.array("prev", "committed").alias("offsets"),
        F.col("prev_ts").alias("t_start_ns"), F.col("ts_ns").alias("t_end_ns"),
        F.format_string("consumer %s (pid %s) committed offset %s of partition %s after the group had committed %s",
                        "consumer", "consumer_pid", "committed", "partition", "prev").alias("detail"))


def double_ownership_anomalies(segments: DataFrame) -> DataFrame:
    """double_ownership: two processes of one group read one partition in overlapping time windows (segments:
    neither had lost it in between). One row per overlapping pair, on the segment that started later."""
    a = segments.select(*[F.col(c).alias(f"a_{c}") for c in segments.columns])
    pairs = a.join(segments, (F.col("a_g") == F.col("g")) & (F.col("a_partition") == F.col("partition"))
                   & ((F.col("a_consumer_pid") != F.col("consumer_pid")) | (F.col("a_consumer") != F.col("consumer"))
                      | (F.col("a_incarnation") != F.col("incarnation")))
                   & ((F.col("a_first_ns") < F.col("first_ns"))
                      | ((F.col("a_first_ns") == F.col("first_ns")) & (F.col("a_consumer_pid") < F.col("consumer_pid"))))
                   & (F.col("first_ns") < F.col("a_last_ns")))
    return pairs.select(
        F.lit("double_ownership").alias("kind"), F.col("first_value").alias("value_id"), *PROC, "g", "partition",
        F.col("first_offset").alias("offset"), F.array("a_first_offset", "a_last_offset").alias("offsets"),
        F.col("first_ns").alias("t_start_ns"), F.col("a_last_ns").alias("t_end_ns"),
        F.format_string("consumer %s (pid %s) read partition %s from offset %s while consumer %s (pid %s) of the same "
                        "group still read it (offsets %s..%s) without a revoke in between",
                        "consumer", "consumer_pid", "partition", "first_offset", "a_consumer", "a_consumer_pid",
                        "a_first_offset", "a_last_offset").alias("detail"))


def commit_anomalies(reads: DataFrame, events: DataFrame, audit: DataFrame, ctx: RunContext) -> DataFrame:
    """Every commit-consistency anomaly of a run, in the job's anomaly columns."""
    commits = successful_commits(events, ctx).persist()
    segments = ownership_segments(reads, events, ctx).persist()
    ctx.cached += [commits, segments]
    rows = (start_anomalies(segments, commits, audit, reads, ctx)
            .unionByName(beyond_read_anomalies(commits, audit, reads, ctx))
            .unionByName(regression_anomalies(commits))
            .unionByName(double_ownership_anomalies(segments)))
    group_name = lookup_col(dict(enumerate(ctx.groups)), "string", F.col("g"), ctx.groups[0] if ctx.groups else None)
    return rows.select(
        "kind", "value_id",
        F.when(F.col("value_id") >= 0, F.shiftright("value_id", 32)).cast("int").alias("producer"),
        "partition", "offset", "offsets", F.lit(None).cast("array<bigint>").alias("value_ids"), "consumer",
        "consumer_pid", group_name.alias("group"), "t_start_ns", "t_end_ns", "detail")
