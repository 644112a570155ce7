"""Latency and time: percentile histograms overall and per fault, the per-second timeseries, per-fault metrics."""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .base import NO_FAULT, NS_PER_MS, NS_PER_S, PERCENTILES
from .columns import count_if, int_map, lookup_col, second_of
from .context import RunContext


def value_bucket(us: Column, digits: int) -> Column:
    """`us` (an integer of microseconds; apply to a plain column, it is referenced often)
    with its magnitude truncated to `digits` significant digits, exact below 10**digits µs.

    Integer arithmetic only, smallest magnitudes tested first: the hot path of the
    latency histograms (log10/pow or percentile_approx cost several times more)."""
    a = F.abs(us)
    bucket = F.when(a < F.lit(10 ** digits), a)
    for p in range(digits, 18):
        bucket = bucket.when(a < F.lit(10 ** (p + 1)), a - a % F.lit(10 ** (p - digits + 1)))
    bucket = bucket.otherwise(a)
    return F.when(us < 0, -bucket).otherwise(bucket).cast("long")


def _us(delta_ns: Column) -> Column:
    return (delta_ns / F.lit(1000)).cast("long")


def histogram_percentiles(buckets: Iterable[tuple[int, int, float]]) -> dict[str, Any]:
    """Nearest-rank percentiles in ms from (bucket µs, count, max ms) rows (pure Python).

    The rank is exact; the value is its bucket's (see `value_bucket`); `max` is exact.
    """
    rows = sorted(buckets, key=lambda r: r[0])
    total = sum(n for _, n, _ in rows)
    out: dict[str, Any] = {"count": total}
    for name, q in PERCENTILES:
        out[name] = None
        if total:
            rank, seen = max(1, math.ceil(q * total - 1e-9)), 0
            for bucket, n, _ in rows:
                seen += n
                if seen >= rank:
                    out[name] = bucket / 1000
                    break
    out["max"] = max((mx for _, _, mx in rows), default=None)
    return out


LATENCIES: dict[str, tuple[str, str]] = {
    "publish": ("send_ns", "complete_ns"),  # acked only
    "publish_delay": ("intended_ns", "send_ns"),
    "end_to_end": ("intended_ns", "first_read_ns"),
}
ALL_VALUES = "(all)"
LATENCY_DIGITS = 3      # latency percentiles: 3 significant digits of µs (exact below 1 ms)
TIMESERIES_DIGITS = 2   # per-second p99: 2 significant digits of µs


def latency_metrics(values: DataFrame, faults: list[dict[str, Any]], end_ns: int) -> tuple[dict, dict]:
    """Latency percentiles overall and per fault window (by send time; '(none)': no fault active).

    One aggregation into (fault set, metric, µs bucket) counts; the driver expands the
    (few) fault sets into windows and reads the percentiles off the histograms.
    """
    sent = values.filter(F.col("sent"))
    t = F.coalesce(F.col("send_ns"), F.col("intended_ns"))
    # The active faults as a bit mask (bit i: faults[i]): a cheap grouping key.
    mask = F.lit(0).cast("long")
    for i, f in enumerate(faults[:62]):
        heal = f["heal_ns"] if f["heal_ns"] is not None else end_ns
        mask = mask + F.when((t >= F.lit(f["start_ns"])) & (t <= F.lit(heal)), F.lit(1 << i)).otherwise(F.lit(0))
    names = list(LATENCIES)
    metrics = []
    for code, (name, (a, b)) in enumerate(LATENCIES.items()):
        cond = F.col(a).isNotNull() & F.col(b).isNotNull()
        if name == "publish":
            cond = cond & (F.col("outcome") == "ok")
        metrics.append(F.struct(F.lit(code).alias("metric"), F.when(cond, F.col(b) - F.col(a)).alias("d")))
    pairs = F.array(*metrics).cast("array<struct<metric:int,d:bigint>>")
    rows = (sent.select(mask.alias("mask"), pairs.alias("pairs"))
            .select("mask", F.inline("pairs")).filter(F.col("d").isNotNull())
            .withColumn("us", _us(F.col("d"))))
    hist: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
    for r in rows.groupBy("mask", "metric", value_bucket(F.col("us"), LATENCY_DIGITS).alias("b")).agg(
            F.count("*").alias("n"), (F.max("d") / NS_PER_MS).alias("mx")).collect():
        active = [f["fault_id"] for i, f in enumerate(faults[:62]) if r["mask"] >> i & 1]
        for window in [ALL_VALUES, *(active or [NO_FAULT])]:
            hist.setdefault((window, names[r["metric"]]), []).append((r["b"], r["n"], r["mx"]))
    windows_seen = {w for w, _ in hist} | {ALL_VALUES}
    stats = {w: {n: histogram_percentiles(hist.get((w, n), [])) for n in LATENCIES} for w in windows_seen}
    overall = stats.pop(ALL_VALUES)
    return overall, stats


def timeseries_rows(sends: DataFrame, reads: DataFrame, ctx: RunContext, t0: int,
                    faults: list[dict[str, Any]], end_ns: int) -> list[dict[str, Any]]:
    """Per-second rows. The per-second aggregates are small: one collect, assembled on the driver."""
    ok = F.col("outcome") == "ok"
    group = lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
    code = F.when(ok, 0).when(F.col("outcome") == "fail", 1).otherwise(2)
    d = F.when(ok & F.col("complete_ns").isNotNull(), F.col("complete_ns") - F.col("send_ns"))
    # Three small aggregations; the driver folds them into seconds.
    # 1. by intended second and outcome, with the publish-latency histogram of acked sends
    intent = (sends.select(second_of(F.col("intended_ns"), t0).alias("s"), code.alias("c"), d.alias("d"))
              .withColumn("us", _us(F.col("d")))
              .groupBy("s", "c", value_bucket(F.col("us"), TIMESERIES_DIGITS).alias("b"))
              .agg(F.count("*").alias("n"), (F.max("d") / NS_PER_MS).alias("mx")))
    # 2. by completion second and partition: acks/errors and the highest acked offset (log end)
    done = (sends.filter(F.col("complete_ns").isNotNull())
            .groupBy(second_of(F.col("complete_ns"), t0).alias("s"), F.col("partition").alias("p"), ok.alias("ok"))
            .agg(F.count("*").alias("n"), F.max(F.when(ok & (F.col("offset") >= 0), F.col("offset"))).alias("o")))
    # 3. by read second, group and partition: reads and the highest offset read (position)
    rd = reads.groupBy(second_of(F.col("read_ns"), t0).alias("s"), group.alias("g"), F.col("partition").alias("p")).agg(
        F.count("*").alias("n"), F.max("offset").alias("o"))
    cols = {"s": "long", "c": "int", "b": "long", "p": "int", "ok": "boolean", "g": "int", "n": "long",
            "mx": "double", "o": "long"}

    def shaped(df: DataFrame, tag: str) -> DataFrame:
        return df.select(F.lit(tag).alias("tag"), *[(F.col(c) if c in df.columns else F.lit(None)).cast(t).alias(c)
                                                  for c, t in cols.items()])

    # One job for the three (one collect per Spark job is the cost that matters on small runs).
    rows = shaped(intent, "intent").unionByName(shaped(done, "done")).unionByName(shaped(rd, "read")).collect()
    by_intent: dict[int, list[int]] = {}
    lat_hist: dict[int, list[tuple[int, int, float]]] = {}
    by_done: dict[int, list[int]] = {}
    ack_pos = []
    by_read: dict[int, int] = {}
    read_pos = []
    for r in rows:
        if r["tag"] == "intent":
            by_intent.setdefault(r["s"], [0, 0, 0])[r["c"]] += r["n"]
            if r["b"] is not None:
                lat_hist.setdefault(r["s"], []).append((r["b"], r["n"], r["mx"]))
        elif r["tag"] == "done":
            by_done.setdefault(r["s"], [0, 0])[0 if r["ok"] else 1] += r["n"]
            if r["o"] is not None:
                ack_pos.append((r["p"], r["s"], r["o"]))
        else:
            by_read[r["s"]] = by_read.get(r["s"], 0) + r["n"]
            if r["o"] is not None:  # an application's processed records have no input offset (issue 39)
                read_pos.append((r["g"], r["p"], r["s"], r["o"]))
    p99 = {s: histogram_percentiles(h)["p99"] for s, h in lat_hist.items()}
    seconds = set(by_intent) | set(by_done) | set(by_read)
    if not seconds:
        return []
    lo, hi = min(min(seconds), 0), max(seconds)
    lag = consumer_lag_series(ack_pos, read_pos, lo, hi) if ctx.has_consumers else {}
    rows = []
    for s in range(lo, hi + 1):
        ok_n, fail_n, indef_n = by_intent.get(s, (0, 0, 0))
        acks_done, errors_done = by_done.get(s, (0, 0))
        attempted = ok_n + fail_n + indef_n
        start, end = t0 + s * NS_PER_S, t0 + (s + 1) * NS_PER_S - 1
        rows.append({
            "second": s, "attempted": attempted, "acked": ok_n, "failed": fail_n, "indefinite": indef_n,
            "ok_ratio": (ok_n / attempted) if attempted else None,
            "acks_completed": acks_done, "errors_completed": errors_done,
            "reads": int(by_read.get(s, 0)), "publish_p99_ms": p99.get(s),
            "consumer_lag": lag.get(s),
            "unavailable": attempted > 0 and acks_done == 0,
            "active_faults": [f["fault_id"] for f in faults
                              if f["start_ns"] <= end and (f["heal_ns"] if f["heal_ns"] is not None else end_ns) >= start],
        })
    return rows


def consumer_lag_series(acks: Iterable[tuple[int, int, int]], reads: Iterable[tuple[int, int, int, int]],
                        lo: int, hi: int) -> dict[int, int]:
    """Max over groups of the summed per-partition lag, per second (pure Python, small input)."""
    ack_by: dict[int, dict[int, int]] = {}
    for p, s, o in acks:
        ack_by.setdefault(s, {})[p] = max(o, ack_by.get(s, {}).get(p, -1))
    read_by: dict[int, dict[tuple[int, int], int]] = {}
    groups = set()
    for g, p, s, o in reads:
        groups.add(g)
        read_by.setdefault(s, {})[(g, p)] = max(o, read_by.get(s, {}).get((g, p), -1))
    end: dict[int, int] = {}
    pos: dict[tuple[int, int], int] = {}
    out = {}
    for s in range(lo, hi + 1):
        for p, o in ack_by.get(s, {}).items():
            end[p] = max(end.get(p, -1), o + 1)
        for gp, o in read_by.get(s, {}).items():
            pos[gp] = max(pos.get(gp, -1), o + 1)
        out[s] = max((sum(max(0, e - pos.get((g, p), 0)) for p, e in end.items()) for g in (groups or {0})), default=0)
    return out


def unavailability_windows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, int]]:
    """Maximal runs of consecutive unavailable seconds."""
    out: list[dict[str, int]] = []
    for r in rows:
        if not r["unavailable"]:
            continue
        if out and out[-1]["end_s"] == r["second"] - 1:
            out[-1]["end_s"] = r["second"]
            out[-1]["seconds"] += 1
        else:
            out.append({"start_s": r["second"], "end_s": r["second"], "seconds": 1})
    return out


def fault_metrics(sends: DataFrame, faults: list[dict[str, Any]], t0: int, end_ns: int,
                  ts_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per fault: time to first error, recovery, longest ack gap, max consumer lag."""
    if not faults:
        return []
    order = sorted(faults, key=lambda f: (f["start_ns"], f["fault_id"]))
    starts = [f["start_ns"] for f in order]
    heal = {i: (f["heal_ns"] if f["heal_ns"] is not None else end_ns) for i, f in enumerate(order)}
    done = F.col("complete_ns")
    # Each completion belongs to the most recently injected fault: windows
    # [start_i, start_{i+1}) partition the time after the first injection.
    idx = F.lit(None).cast("int")
    for i, s in enumerate(starts):
        idx = F.when(done >= F.lit(s), F.lit(i)).otherwise(idx)
    ok = F.col("outcome") == "ok"
    c = sends.filter(done.isNotNull()).select(done, ok.alias("ok"), idx.alias("idx")).filter(F.col("idx").isNotNull())
    a = {r["idx"]: r for r in c.groupBy("idx").agg(
        F.min(F.when(~F.col("ok"), done)).alias("first_err"), F.max(F.when(~F.col("ok"), done)).alias("last_err"),
        count_if(~F.col("ok")).alias("errors"), count_if(F.col("ok")).alias("acks")).collect()}
    last_err = {i: r["last_err"] for i, r in a.items() if r["last_err"] is not None}
    after_err = F.try_element_at(int_map(last_err, "bigint"), F.col("idx"))
    after_heal = F.try_element_at(int_map(heal, "bigint"), F.col("idx"))
    b = {r["idx"]: r for r in c.filter(F.col("ok")).groupBy("idx").agg(
        F.min(F.when(done > after_err, done)).alias("recovered"),
        F.min(F.when(done > after_heal, done)).alias("first_ack_after_heal")).collect()}
    # Longest interval without an ack completion from injection to the first ack after heal.
    horizon = {i: end_ns if b.get(i) is None or b[i]["first_ack_after_heal"] is None else b[i]["first_ack_after_heal"]
               for i in heal}
    in_window = (done >= F.lit(None).cast("long"))
    for i, s in enumerate(starts):
        in_window = F.when(F.col("idx") == i, (done >= F.lit(s)) & (done <= F.lit(horizon[i]))).otherwise(in_window)
    wgap = Window.partitionBy("idx").orderBy(done)
    gaps = {r["idx"]: r for r in c.filter(F.col("ok") & in_window)
            .withColumn("gap", done - F.lag(done).over(wgap))
            .groupBy("idx").agg(F.max("gap").alias("gap"), F.min(done).alias("first"), F.max(done).alias("last"))
            .collect()}
    out = []
    for i, f in enumerate(order):
        ra, rb, rg = a.get(i), b.get(i), gaps.get(i)
        gap_candidates = [horizon[i] - starts[i]] if rg is None else [
            rg["gap"] or 0, rg["first"] - starts[i], horizon[i] - rg["last"]]
        first_err = ra["first_err"] if ra else None
        recovered = rb["recovered"] if rb and last_err.get(i) is not None else None
        heal_ns = f["heal_ns"]
        lag_window = [r["consumer_lag"] for r in ts_rows
                      if r["consumer_lag"] is not None
                      and t0 + (r["second"] + 1) * NS_PER_S > starts[i] and t0 + r["second"] * NS_PER_S <= horizon[i]]
        out.append({
            "fault_id": f["fault_id"], "kind": f["kind"], "target": f["target"],
            "start_s": (starts[i] - t0) / NS_PER_S,
            "heal_s": None if heal_ns is None else (heal_ns - t0) / NS_PER_S,
            "errors": int(ra["errors"]) if ra else 0, "acks": int(ra["acks"]) if ra else 0,
            "time_to_first_error_ms": None if first_err is None else (first_err - starts[i]) / NS_PER_MS,
            "last_error_s": None if last_err.get(i) is None else (last_err[i] - t0) / NS_PER_S,
            "acks_resume_ms": None if recovered is None else (recovered - starts[i]) / NS_PER_MS,
            "recovery_after_heal_ms": None if recovered is None or heal_ns is None else (recovered - heal_ns) / NS_PER_MS,
            "max_ack_gap_ms": max(gap_candidates) / NS_PER_MS,
            "max_consumer_lag": max(lag_window) if lag_window else None,
        })
    return out
