"""Causes of anomalies: writes the fault proxy kept from the client (attribution) and leaderless windows."""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .base import NS_PER_S
from .schemas import WRITES_SCHEMA


# Value-level kinds whose first copy in the log may be a write the client never heard
# of (a Produce response the fault proxy dropped, replaced or discarded): attributed to that fault.
ATTRIBUTED_KINDS: tuple[str, ...] = ("duplicates", "aborted_reads", "indefinite_landed")
# proxy_events phases after which the broker had written a batch the client was not told about
# (`response_discarded` only where the answer had arrived: its row has base offsets).
UNACKNOWLEDGED_WRITE_PHASES = ("response_dropped", "response_replaced", "response_discarded")
UNATTRIBUTED = "(unattributed)"


def unacknowledged_writes(rows: Iterable[Mapping[str, Any]], topic: str | None) -> list[dict[str, Any]]:
    """Pure: the writes the broker made but the client never heard of, one per partition write.

    From `proxy_events` rows whose phase is `response_dropped` (lost ack),
    `response_replaced` (an error answered after the broker appended) or
    `response_discarded` (an answer lost when the proxy reset the connection, or that
    a latency rule still held back when the client gave up; only those whose answer
    came, before the reset or after it, carry base offsets): each partition with a base offset
    >= 0 took offsets [base, base + record_count - 1] (only `base` when the count is
    unknown). Rows of other topics are ignored when `topic` is known; a write
    recorded twice is kept once (earliest). A `response_discarded` answer the proxy had
    written to the client just before the reset (`detail.delivered`) is `delivered`: the
    client may have read it, so only a duplicate of it (a retry) shows it had not.
    """
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["ts_ns"] or 0):
        if r["phase"] not in UNACKNOWLEDGED_WRITE_PHASES or not r["base_offsets"]:
            continue
        if topic is not None and r["topic"] is not None and r["topic"] != topic:
            continue
        counts = r["record_counts"] or []
        delivered = bool(r.get("detail") and json.loads(r["detail"]).get("delivered"))
        for i, (partition, base) in enumerate(zip(r["partitions"] or [], r["base_offsets"])):
            if base is None or base < 0:
                continue
            n = counts[i] if i < len(counts) and counts[i] is not None and counts[i] > 0 else 1
            out.setdefault((int(partition), int(base)), {
                "partition": int(partition), "first_offset": int(base), "last_offset": int(base) + n - 1,
                "cause_fault_id": r["fault_id"] or r["rule_id"], "action": r["action"], "phase": r["phase"],
                "broker": r["broker"], "conn": r["conn"], "correlation_id": r["correlation_id"], "ts_ns": r["ts_ns"],
                "delivered": delivered,
            })
    return sorted(out.values(), key=lambda w: (w["partition"], w["first_offset"]))


def cause_text(write: Mapping[str, Any]) -> str:
    """Pure: one sentence naming the proxy action behind an attributed anomaly."""
    if write["phase"] == "response_discarded" and write["action"] == "latency":
        what = "the fault proxy held back until the client gave up on it (closed the connection)"
    elif write.get("delivered"):
        what = "the fault proxy wrote to the client just before it reset the connection, unread by the client"
    else:
        what = {"response_dropped": "the fault proxy dropped (lost ack)",
                "response_replaced": "the fault proxy replaced with an error",
                "response_discarded": "was discarded when the fault proxy reset the connection"}.get(
            write["phase"], f"the fault proxy did not deliver ({write['phase']})")
    return (f"first copy is the write at offsets {write['first_offset']}..{write['last_offset']} (Produce to "
            f"broker {write['broker']}, connection {write['conn']}, correlation id {write['correlation_id']}) "
            f"whose response {what}: fault {write['cause_fault_id']}")


def leaderless_windows(snapshots: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pure: per partition, the maximal runs of snapshots in which it had no live leader.

    A partition has no live leader when the sampled leader is -1 or a node that was not
    running. A window runs from its first such snapshot to the first snapshot after it
    with a live leader (or its last snapshot, if none followed).
    """
    by_part: dict[int, list[Mapping[str, Any]]] = {}
    for r in snapshots:
        by_part.setdefault(int(r["partition"]), []).append(r)
    out = []
    for p, rows in sorted(by_part.items()):
        start = None
        rows = sorted(rows, key=lambda r: r["ts_ns"])
        for r in rows:
            live = list(r["live_nodes"] or [])
            down = r["leader"] is None or r["leader"] < 0 or r["leader"] not in live
            if down and start is None:
                start = r["ts_ns"]
            elif not down and start is not None:
                out.append({"partition": p, "start_ns": int(start), "end_ns": int(r["ts_ns"])})
                start = None
        if start is not None:
            out.append({"partition": p, "start_ns": int(start), "end_ns": int(rows[-1]["ts_ns"]), "open": True})
    return out


def undelivered_causes(anomalies: DataFrame, windows: list[dict[str, Any]], t0: int) -> DataFrame:
    """Append to each `undelivered_attempts` row why its value never reached the application:
    the partition had no live leader while it was being sent, or it never got a partition."""
    cause = F.lit(None).cast("string")
    for w in reversed(windows):
        overlaps = ((F.col("partition") == w["partition"]) & (F.col("t_start_ns") <= F.lit(w["end_ns"]))
                    & (F.coalesce(F.col("t_end_ns"), F.col("t_start_ns")) >= F.lit(w["start_ns"])))
        text = (f"partition {w['partition']} had no live leader from t={(w['start_ns'] - t0) / NS_PER_S:.1f}s "
                f"to t={(w['end_ns'] - t0) / NS_PER_S:.1f}s" + (" (end of the run)" if w.get("open") else ""))
        cause = F.when(overlaps, F.lit(text)).otherwise(cause)
    cause = F.when(F.col("partition") < 0, F.lit("it never got a partition: the producer had no metadata for the "
                                                 "topic")).otherwise(cause)
    is_undelivered = F.col("kind") == "undelivered_attempts"
    return (anomalies
            .withColumn("cause", F.when(is_undelivered & cause.isNotNull(), cause).otherwise(F.col("cause")))
            .withColumn("detail", F.when(is_undelivered & cause.isNotNull(), F.concat_ws(": ", "detail", cause))
                        .otherwise(F.col("detail"))))


def attribute_causes(spark: SparkSession, anomalies: DataFrame, writes: list[dict[str, Any]]) -> DataFrame:
    """Add `cause_fault_id`/`cause`: set on ATTRIBUTED_KINDS rows whose first log copy
    (`offset`) lies in an unacknowledged write of the same partition, or, for a duplicate,
    whose last copy does (the retry landed first: a request pipelined on a connection a
    reset broke was written after the client's retry on a new one), else null. A write
    whose answer the client may have read (`delivered`) explains duplicates only."""
    if not writes:
        return (anomalies.withColumn("cause_fault_id", F.lit(None).cast("string"))
                .withColumn("cause", F.lit(None).cast("string")))
    w = spark.createDataFrame([(x["partition"], x["first_offset"], x["last_offset"], x["cause_fault_id"],
                                cause_text(x), bool(x.get("delivered"))) for x in writes], WRITES_SCHEMA)
    later = w.select(*[F.col(c).alias(f"l_{c}") for c in w.columns])
    w = w.alias("w")
    a = anomalies.alias("a")
    hit = ((F.col("a.kind").isin(*ATTRIBUTED_KINDS)) & (~F.col("w.duplicates_only") | (F.col("a.kind") == "duplicates"))
           & (F.col("a.partition") == F.col("w.partition"))
           & F.col("a.offset").between(F.col("w.first_offset"), F.col("w.last_offset")))
    hit_later = ((F.col("a.kind") == "duplicates") & F.col("w.cause").isNull()
                 & (F.col("a.partition") == F.col("l_partition"))
                 & F.element_at("a.offsets", -1).between(F.col("l_first_offset"), F.col("l_last_offset")))
    # Writes never overlap within a partition, so each anomaly matches at most one per join.
    joined = a.join(F.broadcast(w), hit, "left").join(F.broadcast(later), hit_later, "left")
    cause = F.coalesce(F.col("w.cause"), F.regexp_replace(
        F.col("l_cause"), "^first copy is", "later copy (the retry landed first) is"))
    detail = F.when(cause.isNotNull(), F.concat_ws("; ", F.col("a.detail"), cause)).otherwise(F.col("a.detail"))
    cols = [F.col(f"a.{c}") for c in anomalies.columns if c != "detail"]
    return joined.select(*cols, detail.alias("detail"),
                         F.coalesce(F.col("w.cause_fault_id"), F.col("l_cause_fault_id")).alias("cause_fault_id"),
                         cause.alias("cause"))


def attribution_metrics(anomalies: DataFrame, writes: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json `attribution`: per attributable kind, how many rows each fault caused."""
    rows = (anomalies.filter(F.col("kind").isin(*ATTRIBUTED_KINDS))
            .groupBy("kind", F.coalesce("cause_fault_id", F.lit(UNATTRIBUTED)).alias("cause"))
            .count().collect())
    by_kind: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = by_kind.setdefault(r["kind"], {"attributed": 0, "unattributed": 0, "by_fault": {}})
        if r["cause"] == UNATTRIBUTED:
            k["unattributed"] += int(r["count"])
        else:
            k["attributed"] += int(r["count"])
            k["by_fault"][r["cause"]] = int(r["count"])
    by_fault: dict[str, dict[str, int]] = {}
    for x in writes:
        f = by_fault.setdefault(x["cause_fault_id"], {"writes": 0, "records": 0})
        f["writes"] += 1
        f["records"] += x["last_offset"] - x["first_offset"] + 1
    return {"unacknowledged_writes": len(writes),
            "unacknowledged_records": sum(x["last_offset"] - x["first_offset"] + 1 for x in writes),
            "writes_by_fault": by_fault, "kinds": by_kind}
