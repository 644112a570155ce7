"""kafkaproof analysis job: turn run directories into exact, explainable anomaly counts.

Run as ``spark-submit --py-files <this package, zipped> spark/analyze.py <run_dir> [<run_dir> ...]``
(`kafkaproof.analysis` builds the zip and the command). For each run directory it reads the ledger
(see docs/ledger-schema.md) and writes ``<run_dir>/analysis/``: ``values.parquet``,
``anomalies.parquet``, ``timeseries.parquet`` and ``metrics.json``. Every definition is documented in
docs/analysis.md; keep the two in step.

A run directory is a local path or a URI of any Hadoop filesystem the application can reach
(``file://``, ``hdfs://``, ``s3a://``, ``viewfs://``...): the job reads and writes everything
through Spark and Hadoop's FileSystem API (`RunStore`), never through the driver's own disk, so
it also runs with ``--deploy-mode cluster``.

Self-contained on purpose (pyspark + stdlib only): spark-submit ships this package beside the
entry file. Importable for tests: nothing runs at import time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from .base import ANALYSIS_DIR, ANALYSIS_VERSION, KINDS, NS_PER_S, AnalysisInputError, location, location_name
from .schemas import PIPELINE_TABLES, SCHEMAS, SHARE_TABLES, TIMESERIES_SCHEMA
from .columns import active_fault_ids
from .context import build_context
from .store import RunStore, load_table, read_manifest, write_parquet
from .values import classify_values, reorder_anomalies, value_anomalies, value_observations
from .causes import (UNACKNOWLEDGED_WRITE_PHASES, attribute_causes, attribution_metrics, leaderless_windows,
                     unacknowledged_writes, undelivered_causes)
from .offsets import offset_anomalies
from .polls import poll_anomalies
from .commits import commit_anomalies
from .pipeline import missing_tables, pipeline_anomalies, pipeline_metrics
from .share import missing_share_tables, share_anomalies, share_metrics
from .latency import fault_metrics, latency_metrics, timeseries_rows, unavailability_windows
from .exercised import CLOCK_FAULT_KINDS, exercise_results, timestamp_regressions
from .metrics import PhaseClock, aborted_in_log, count_and_examples, outcome_counts, run_bounds


def analyze_run(spark: SparkSession, run_dir: str, log=print) -> dict[str, Any]:
    """Analyse one run directory (a path or a URI); writes `<run_dir>/analysis/` and returns the metrics."""
    store = RunStore(spark)
    run_dir = location(run_dir)
    name = location_name(run_dir)
    clock = PhaseClock(name, log)
    ctx = build_context(run_dir, read_manifest(store, run_dir))
    tables = {t: load_table(spark, store, run_dir, t) for t in SCHEMAS}
    sends, reads, audit = tables["sends"], tables["reads"], tables["audit"]
    tmp = f"{run_dir}/{ANALYSIS_DIR}.tmp"
    store.delete(tmp)

    fault_rows = [r.asDict() for r in tables["faults"].select(
        "fault_id", "kind", "target", "params", "start_ns", "heal_ns", "effect", "proxy_fired").collect()]
    faults = [{k: f[k] for k in ("fault_id", "kind", "target", "start_ns", "heal_ns")} for f in fault_rows]
    first_ns, last_ns = run_bounds(sends, reads)
    t0 = ctx.t0_ns if ctx.t0_ns is not None else (first_ns if first_ns is not None else 0)
    end_ns = max([x for x in (last_ns, *[f["start_ns"] for f in faults], *[f["heal_ns"] or 0 for f in faults])
                  if x is not None], default=t0)
    last_heal_ns = max([f["heal_ns"] for f in faults if f["heal_ns"] is not None], default=None)
    snapshots = [r.asDict() for r in tables["cluster_snapshots"].collect()]  # one row per partition-second
    clock.mark("inputs")

    values = write_parquet(classify_values(sends, value_observations(audit, reads, ctx), ctx, last_heal_ns),
                    f"{tmp}/values.parquet", files=None, dictionary=False)
    clock.mark("values")

    anomalies = (value_anomalies(values, ctx)
                 .unionByName(reorder_anomalies(values))
                 .unionByName(offset_anomalies(sends, audit, reads, ctx, values))
                 .unionByName(poll_anomalies(reads, tables["consumer_events"], audit, ctx))
                 .unionByName(commit_anomalies(reads, tables["consumer_events"], audit, ctx)))
    pipeline_missing = missing_tables({t: store.exists(f"{run_dir}/{t}.parquet") for t in PIPELINE_TABLES})
    if not pipeline_missing:
        anomalies = anomalies.unionByName(pipeline_anomalies(tables, ctx.manifest))
    share_missing = missing_share_tables({t: store.exists(f"{run_dir}/{t}.parquet") for t in SHARE_TABLES})
    if not share_missing:
        anomalies = anomalies.unionByName(share_anomalies(tables, ctx.manifest))
    unacked = tables["proxy_events"].filter(F.col("phase").isin(*UNACKNOWLEDGED_WRITE_PHASES))
    writes = unacknowledged_writes([r.asDict() for r in unacked.collect()], ctx.topic)
    anomalies = attribute_causes(spark, anomalies, writes)
    leaderless = leaderless_windows(snapshots)
    if ctx.delivery_within_s is not None:
        anomalies = undelivered_causes(anomalies, leaderless, t0)
    fault_ids = active_fault_ids(faults, F.col("t_start_ns"), F.coalesce("t_end_ns", "t_start_ns"), end_ns)
    anomalies = (anomalies.withColumn("t_s", (F.col("t_start_ns") - F.lit(t0)).cast("double") / NS_PER_S)
                 .withColumn("fault_ids", fault_ids)
                 .withColumn("fault_kinds", F.transform("fault_ids", lambda x: _str_lookup({f["fault_id"]: f["kind"] for f in faults}, x)))
                 .withColumn("fault_targets", F.transform("fault_ids", lambda x: _str_lookup({f["fault_id"]: f["target"] for f in faults}, x))))
    # Anomalies are few: one shuffle into one sorted file. A global orderBy would first run the whole
    # anomaly lineage (window passes included) once more to sample its range bounds.
    anomalies = write_parquet(anomalies.repartition(1).sortWithinPartitions("kind", "partition", "offset", "value_id"),
                       f"{tmp}/anomalies.parquet")
    for df in ctx.cached:
        df.unpersist()
    clock.mark("anomalies")

    counts, examples = count_and_examples(anomalies)
    attribution = attribution_metrics(anomalies, writes)
    outcomes = outcome_counts(values, audit, reads)
    exercised = exercise_results(
        fault_rows, ctx.exercised, snapshots,
        {r["phase"]: int(r["count"]) for r in tables["proxy_events"].groupBy("phase").count().collect()},
        {int(r["consumer"]): int(r["inc"]) for r in tables["consumer_events"].groupBy("consumer")
         .agg(F.max("incarnation").alias("inc")).collect()},
        aborted_in_log(sends, audit) if any(c["check"] == "aborted_in_log" for c in ctx.exercised) else 0,
        outcomes, t0)
    clock.mark("counts")
    ts_rows = timeseries_rows(sends, reads, ctx, t0, faults, end_ns)
    spark.createDataFrame(ts_rows, TIMESERIES_SCHEMA).coalesce(1).write.mode("overwrite").parquet(
        f"{tmp}/timeseries.parquet")
    clock.mark("timeseries")
    latency, latency_by_fault = latency_metrics(values, faults, end_ns)
    clock.mark("latency")
    attempted = sum(r["attempted"] for r in ts_rows)
    acked = sum(r["acked"] for r in ts_rows)
    windows = unavailability_windows(ts_rows)
    metrics = {
        "analysis_version": ANALYSIS_VERSION,
        "run_id": ctx.run_id,
        "t0_ns": t0,
        "end_s": (end_ns - t0) / NS_PER_S,
        "kinds": list(KINDS),
        "counts": counts,
        "examples": examples,
        "outcomes": outcomes,
        "complete": ctx.all_complete and counts["unseen"] == 0,
        "partitions": [p.__dict__ for p in ctx.partitions],
        "has_consumers": ctx.has_consumers,
        "groups": ctx.groups,
        "latency_ms": latency,
        "latency_ms_by_fault": latency_by_fault,
        "availability": {
            "attempted": attempted, "acked": acked, "ok_ratio": (acked / attempted) if attempted else None,
            "seconds_with_attempts": sum(1 for r in ts_rows if r["attempted"] > 0),
            "seconds_unavailable": sum(w["seconds"] for w in windows),
            "unavailability_windows": windows,
        },
        "faults": fault_metrics(sends, faults, t0, end_ns, ts_rows),
        "unhealed_faults": [f["fault_id"] for f in faults if f["heal_ns"] is None],
        "attribution": attribution,
        "exercised": exercised,
        "clients": ctx.manifest.get("clients"),
        "timestamps": (timestamp_regressions(audit) if any(f["kind"] in CLOCK_FAULT_KINDS for f in faults)
                       else None),
        "pipeline": pipeline_metrics(tables, pipeline_missing, ctx.manifest),
        "share": share_metrics(tables, share_missing, ctx.manifest),
        "claims": {**({} if ctx.delivery_within_s is None else {"delivery": {
            "within_s": ctx.delivery_within_s, "undelivered": counts["undelivered_attempts"],
            "last_heal_s": None if last_heal_ns is None else (last_heal_ns - t0) / NS_PER_S,
            "leaderless_windows": [{**w, "start_s": (w["start_ns"] - t0) / NS_PER_S,
                                    "end_s": (w["end_ns"] - t0) / NS_PER_S} for w in leaderless]}}),
                   **({"processed_once": {"reprocessed": counts["reprocessed"]}} if ctx.processed_once else {})},
    }
    clock.mark("fault_metrics")
    metrics["job_seconds"], metrics["job_phases"] = clock.total(), clock.phases
    store.write_text(f"{tmp}/metrics.json", json.dumps(metrics, indent=2, sort_keys=True, default=str))
    store.replace(tmp, f"{run_dir}/{ANALYSIS_DIR}")
    log(f"[analyze] {name}: done in {metrics['job_seconds']}s; "
        + ", ".join(f"{k}={v}" for k, v in counts.items() if v))
    return metrics


def _str_lookup(mapping: Mapping[str, str], key: Column) -> Column:
    if not mapping:
        return F.lit(None).cast("string")
    return F.try_element_at(F.create_map(*[F.lit(x) for kv in mapping.items() for x in kv]), key)


ROWS_PER_SHUFFLE_PARTITION = 250_000
MIN_SHUFFLE_PARTITIONS, MAX_SHUFFLE_PARTITIONS = 2, 16


def shuffle_partitions(rows: int) -> int:
    """Pure: shuffle partitions for a ledger of `rows` rows.

    Each partition is a task; a nightly-sized ledger (thousands of rows) runs fastest in
    few of them (Spark's per-task cost dominates), a 10M-value ledger needs more.
    """
    return max(MIN_SHUFFLE_PARTITIONS, min(MAX_SHUFFLE_PARTITIONS, rows // ROWS_PER_SHUFFLE_PARTITION))


def build_session(run_dirs: Sequence[str] = (), app_name: str = "kafkaproof-analyze") -> SparkSession:
    """The SparkSession; settings given to spark-submit (--conf) win over these defaults.

    The shuffle partitions follow the largest ledger (rows from the Parquet footers: nothing is read).
    """
    builder = SparkSession.builder.appName(app_name)
    spark = builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    store = RunStore(spark)
    rows = max((store.parquet_rows(location(d)) for d in run_dirs), default=0)
    defaults = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions(rows)),
        "spark.sql.session.timeZone": "UTC",
    }
    for k, v in defaults.items():
        if not conf.contains(k):
            spark.conf.set(k, v)
    spark.sparkContext.setLogLevel(os.environ.get("KAFKAPROOF_SPARK_LOG_LEVEL", "WARN"))
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    """Analyse each run directory given; exit 1 if any failed, 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="*", help="run directories: local paths or URIs (file://, hdfs://, s3a://...)")
    parser.add_argument("--parallel", type=int, default=None,
                        help="run directories analysed concurrently (default: up to 4); small runs are "
                             "dominated by Spark's per-job latency, which concurrent jobs overlap")
    args = parser.parse_args(argv)
    if not args.run_dirs:  # a batch whose runs all failed: each gets its error verdict without analysis
        print("[analyze] no run directory given: nothing to analyse", flush=True)
        return 0
    spark = build_session(args.run_dirs)
    store = RunStore(spark)
    missing = [d for d in args.run_dirs if not store.exists(f"{location(d)}/manifest.json")]
    if missing:
        for d in missing:
            print(f"[analyze] error: {d}/manifest.json missing; not a run directory", file=sys.stderr)
        spark.stop()
        return 2

    def one(d: str) -> str | None:
        try:
            analyze_run(spark, d, log=lambda m: print(m, flush=True))
            return None
        except AnalysisInputError as exc:
            print(f"[analyze] error: {exc}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - report which run failed, then go on with the others
            print(f"[analyze] error: analysis of {d} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return d

    parallel = max(1, min(args.parallel or 4, len(args.run_dirs)))
    try:
        if parallel == 1:
            failed = [d for d in map(one, args.run_dirs) if d is not None]
        else:
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                failed = [d for d in pool.map(one, args.run_dirs) if d is not None]
    finally:
        spark.stop()
    if failed:
        print(f"[analyze] failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0
