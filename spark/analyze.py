"""kafkaproof analysis job: turn run directories into exact, explainable anomaly counts.

Run as ``spark-submit spark/analyze.py <run_dir> [<run_dir> ...]``. For each run
directory it reads the ledger (see docs/ledger-schema.md) and writes
``<run_dir>/analysis/``: ``values.parquet``, ``anomalies.parquet``,
``timeseries.parquet`` and ``metrics.json``. Every definition is documented in
docs/analysis.md; keep the two in step.

A run directory is a local path or a URI of any Hadoop filesystem the application can reach
(``file://``, ``hdfs://``, ``s3a://``, ``viewfs://``...): the job reads and writes everything
through Spark and Hadoop's FileSystem API (`RunStore`), never through the driver's own disk, so
it also runs with ``--deploy-mode cluster``.

Self-contained on purpose (pyspark + stdlib only): spark-submit ships this one file.
Importable for tests: nothing runs at import time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

ANALYSIS_VERSION = 1
ANALYSIS_DIR = "analysis"

# Every anomaly kind the job counts, in report order. expectations/policy.yaml must
# classify each one (tests/test_analysis.py checks it).
KINDS: tuple[str, ...] = (
    "lost",
    "lost_unconfirmed",
    "unseen",
    "not_delivered",
    "duplicates",
    "observed_duplicates",
    "redeliveries",
    "aborted_reads",
    "dirty_reads",
    "indefinite_landed",
    "inconsistent_offsets",
    "ack_offset_mismatch",
    "reordering",
    "poll_skips",
    "poll_rewinds",
    "poll_inversion",
    "unknown_values",
    "undelivered_attempts",
)

# Value-level kinds: the values.parquet flag column that marks each.
VALUE_FLAGS: dict[str, str] = {
    "lost": "lost",
    "lost_unconfirmed": "lost_unconfirmed",
    "unseen": "unseen",
    "not_delivered": "not_delivered",
    "duplicates": "duplicate",
    "observed_duplicates": "observed_duplicate",
    "aborted_reads": "aborted_read",
    "dirty_reads": "dirty_read",
    "indefinite_landed": "indefinite_landed",
    "unknown_values": "unknown_value",
    "undelivered_attempts": "undelivered",
}

PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
EXAMPLES_PER_KIND = 10
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
REBALANCE_EVENTS = ("assign", "revoke", "lost")
NO_FAULT = "(none)"

# Spark schemas of the ledger tables (mirror of plugins/kafkaproof/spec/ledger.py).
_I32, _I64, _STR, _BOOL = T.IntegerType(), T.LongType(), T.StringType(), T.BooleanType()


def _schema(*cols: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t, True) for n, t in cols])


SCHEMAS: dict[str, T.StructType] = {
    "sends": _schema(
        ("value_id", _I64), ("producer", _I32), ("producer_pid", _I32), ("seq", _I64), ("key", _STR),
        ("partition", _I32), ("intended_ns", _I64), ("send_ns", _I64), ("complete_ns", _I64),
        ("outcome", _STR), ("offset", _I64), ("error_code", _I32), ("error_name", _STR),
        ("txn_id", _I64), ("txn_outcome", _STR),
    ),
    "reads": _schema(
        ("consumer", _I32), ("consumer_pid", _I32), ("incarnation", _I32), ("generation", _I32),
        ("partition", _I32), ("offset", _I64), ("key", _STR), ("value_id", _I64), ("read_ns", _I64),
        ("poll_id", _I64), ("poll_seq", _I32),
    ),
    "consumer_events": _schema(
        ("consumer", _I32), ("consumer_pid", _I32), ("incarnation", _I32), ("ts_ns", _I64), ("event", _STR),
        ("partitions", T.ArrayType(_I32)), ("offsets", T.ArrayType(_I64)), ("success", _BOOL), ("error", _STR),
        ("assigned", T.ArrayType(_I32)),
    ),
    "audit": _schema(
        ("isolation", _STR), ("partition", _I32), ("offset", _I64), ("key", _STR), ("value_id", _I64),
        ("timestamp_ms", _I64),
    ),
    "faults": _schema(
        ("fault_id", _STR), ("kind", _STR), ("target", _STR), ("nodes", T.ArrayType(_I32)), ("params", _STR),
        ("start_ns", _I64), ("heal_ns", _I64), ("start_wall", _STR), ("heal_wall", _STR), ("proxy_fired", _I64),
        ("effect", _STR),
    ),
    "cluster_snapshots": _schema(
        ("ts_ns", _I64), ("partition", _I32), ("leader", _I32), ("replicas", T.ArrayType(_I32)),
        ("isr", T.ArrayType(_I32)), ("controller", _I32), ("live_nodes", T.ArrayType(_I32)),
    ),
    # Only the columns the attribution needs (Parquet reads the named columns).
    "proxy_events": _schema(
        ("ts_ns", _I64), ("fault_id", _STR), ("rule_id", _STR), ("broker", _I32), ("conn", _I64),
        ("correlation_id", _I32), ("action", _STR), ("phase", _STR), ("topic", _STR),
        ("partitions", T.ArrayType(_I32)), ("base_offsets", T.ArrayType(_I64)),
        ("record_counts", T.ArrayType(_I32)),
    ),
}
REQUIRED_TABLES = ("sends", "audit")

# Value-level kinds whose first copy in the log may be a write the client never heard
# of (a Produce response the fault proxy dropped, replaced or discarded): attributed to that fault.
ATTRIBUTED_KINDS: tuple[str, ...] = ("duplicates", "aborted_reads", "indefinite_landed")
# proxy_events phases after which the broker had written a batch the client was not told about
# (`response_discarded` only where the answer had arrived: its row has base offsets).
UNACKNOWLEDGED_WRITE_PHASES = ("response_dropped", "response_replaced", "response_discarded")
UNATTRIBUTED = "(unattributed)"

ANOMALIES_SCHEMA = _schema(
    ("kind", _STR), ("value_id", _I64), ("producer", _I32), ("partition", _I32), ("offset", _I64),
    ("offsets", T.ArrayType(_I64)), ("value_ids", T.ArrayType(_I64)), ("consumer", _I32),
    ("consumer_pid", _I32), ("group", _STR), ("t_start_ns", _I64), ("t_end_ns", _I64), ("detail", _STR),
)

TIMESERIES_SCHEMA = _schema(
    ("second", _I64), ("attempted", _I64), ("acked", _I64), ("failed", _I64), ("indefinite", _I64),
    ("ok_ratio", T.DoubleType()), ("acks_completed", _I64), ("errors_completed", _I64), ("reads", _I64),
    ("publish_p99_ms", T.DoubleType()), ("consumer_lag", _I64), ("unavailable", _BOOL),
    ("active_faults", T.ArrayType(_STR)),
)


class AnalysisInputError(Exception):
    """A run directory lacks what the analysis needs (message names the file)."""


# --------------------------------------------------------------------------- manifest

@dataclass(frozen=True)
class PartitionAudit:
    """Manifest `audit` facts about one partition."""

    partition: int
    low: int | None
    high: int | None
    complete: bool


@dataclass
class RunContext:
    """What the job needs from manifest.json, parsed into plain Python."""

    run_dir: str
    run_id: str
    t0_ns: int | None
    partitions: list[PartitionAudit]
    producer_acks: dict[int, int]
    default_acks: int
    consumer_group: dict[int, int]
    consumer_read_committed: dict[int, bool]
    groups: list[str]
    has_consumers: bool
    topic: str | None = None  # the scenario topic (proxy events of other topics are ignored)
    # Producers whose delivery reports carry offsets a broker assigned (not acks=0's made-up ones).
    producer_broker_offsets: dict[int, bool] = field(default_factory=dict)
    delivery_within_s: float | None = None  # claims.delivery: every attempted value delivered within this bound
    exercised: list[dict[str, Any]] = field(default_factory=list)  # the scenario's own exercised conditions
    manifest: dict[str, Any] = field(repr=False, default_factory=dict)
    cached: list[DataFrame] = field(repr=False, default_factory=list)  # persisted for one run; unpersisted after

    @property
    def all_complete(self) -> bool:
        return bool(self.partitions) and all(p.complete for p in self.partitions)

    @property
    def groups_mask(self) -> int:
        return (1 << len(self.groups)) - 1


def _lookup(entry: Mapping[str, Any], *names: str) -> Any:
    """Find a client setting in a scenario entry or its config sub-mapping."""
    for scope in (entry, entry.get("config"), entry.get("settings"), entry.get("properties")):
        if isinstance(scope, Mapping):
            for name in names:
                if scope.get(name) is not None:
                    return scope[name]
    return None


def expand_clients(scenario: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """One settings dict per client index of `scenario[key]` ('producers'/'consumers').

    Accepts a list of entries (each optionally with `count`/`instances`), one
    mapping, or an integer count with the shared settings under the singular key.
    """
    raw = scenario.get(key)
    if raw is None:
        return []
    if isinstance(raw, int):
        shared = scenario.get(key[:-1]) or {}
        return [dict(shared) for _ in range(raw)]
    if isinstance(raw, Mapping):
        raw = [raw]
    out: list[dict[str, Any]] = []
    for entry in raw:
        entry = dict(entry or {})
        count = entry.get("count", entry.get("instances", 1))
        out.extend(dict(entry) for _ in range(int(count if count is not None else 1)))
    return out


def parse_acks(value: Any) -> int:
    """Normalise a producer `acks` setting to -1 (all), 0 or 1; librdkafka's default is all."""
    if value is None:
        return -1
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    try:
        return int(text)
    except ValueError as exc:
        raise AnalysisInputError(f"manifest: producer acks={value!r} is not all/-1/0/1") from exc


def parse_isolation(value: Any) -> bool:
    """True when a consumer reads committed data (librdkafka's default)."""
    return value is None or str(value).strip().lower() == "read_committed"


def parse_partitions(audit: Any) -> list[PartitionAudit]:
    """Manifest `audit.partitions` (mapping keyed by partition, or list) to PartitionAudit rows."""
    if not isinstance(audit, Mapping):
        return []
    raw = audit.get("partitions") or {}
    items: list[tuple[Any, Mapping[str, Any]]]
    if isinstance(raw, Mapping):
        items = list(raw.items())
    else:
        items = [(e.get("partition"), e) for e in raw]
    out = []
    for key, info in items:
        info = info or {}
        low, high = info.get("low"), info.get("high")
        out.append(PartitionAudit(
            partition=int(key),
            low=None if low is None else int(low),
            high=None if high is None else int(high),
            complete=bool(info.get("complete", False)),
        ))
    return sorted(out, key=lambda p: p.partition)


def clients_from_scenario(scenario: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The `clients` section of runs written before the manifest had one: read off the scenario."""
    producers = expand_clients(scenario, "producers")
    consumers = expand_clients(scenario, "consumers")
    prods = []
    for i, p in enumerate(producers):
        acks = parse_acks(_lookup(p, "acks", "request.required.acks"))
        prods.append({"index": i, "acks": acks, "offsets_from_broker": acks != 0})
    cons = [{"index": i, "group": str(_lookup(c, "group", "group_id", "group.id") or "default"),
             "isolation_level": _lookup(c, "isolation_level", "isolation", "isolation.level")}
            for i, c in enumerate(consumers)]
    return {"producers": prods, "consumers": cons}


def build_context(run_dir: str, manifest: Mapping[str, Any]) -> RunContext:
    """Parse the manifest facts the job relies on (documented in docs/analysis.md).

    What each client ran with comes from the manifest's `clients` section (resolved once by the
    runner), never from the scenario's fields, which a client property could contradict.
    """
    scenario = manifest.get("scenario") or {}
    clients = manifest.get("clients") or clients_from_scenario(scenario)
    producer_acks = {int(p["index"]): parse_acks(p.get("acks")) for p in clients.get("producers", [])}
    broker_offsets = {int(p["index"]): bool(p.get("offsets_from_broker", parse_acks(p.get("acks")) != 0))
                      for p in clients.get("producers", [])}
    group_names: list[str] = []
    consumer_group: dict[int, int] = {}
    consumer_rc: dict[int, bool] = {}
    for c in clients.get("consumers", []):
        i, name = int(c["index"]), str(c.get("group") or "default")
        if name not in group_names:
            group_names.append(name)
        consumer_group[i] = group_names.index(name)
        consumer_rc[i] = parse_isolation(c.get("isolation_level"))
    if not group_names:
        group_names = ["default"]
    clock = manifest.get("clock") or {}
    t0 = clock.get("monotonic_origin_ns")
    delivery = (scenario.get("claims") or {}).get("delivery")
    return RunContext(
        run_dir=str(run_dir),
        run_id=str(manifest.get("run_id", location_name(str(run_dir)))),
        t0_ns=None if t0 is None else int(t0),
        partitions=parse_partitions(manifest.get("audit")),
        producer_acks=producer_acks,
        default_acks=-1,
        consumer_group=consumer_group,
        consumer_read_committed=consumer_rc,
        groups=group_names,
        has_consumers=bool(consumer_group),
        topic=manifest.get("topic") or (scenario.get("topic") or {}).get("name"),
        producer_broker_offsets=broker_offsets,
        delivery_within_s=None if delivery is None else float((delivery or {}).get("within_s", 60.0)),
        exercised=list(scenario.get("exercised") or []),
        manifest=dict(manifest),
    )


# --------------------------------------------------------------------------- helpers

def _sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}L" if abs(v) >= 2**31 else str(v)
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _int_map(mapping: Mapping[int, Any], value_type: str) -> Column:
    """A literal Spark map column, built from one SQL expression (one JVM call, not one per entry)."""
    if not mapping:
        return F.expr(f"cast(map() as map<int,{value_type}>)")
    body = ", ".join(f"{int(k)}, {_sql_literal(v)}" for k, v in mapping.items())
    return F.expr(f"cast(map({body}) as map<int,{value_type}>)")


def _lookup_col(mapping: Mapping[int, Any], value_type: str, key: Column, default: Any) -> Column:
    return F.coalesce(F.try_element_at(_int_map(mapping, value_type), key.cast("int")), F.lit(default))


def _count(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def _ms(delta_ns: Column) -> Column:
    return delta_ns.cast("double") / NS_PER_MS


def _second(ts: Column, t0: int) -> Column:
    return F.floor((ts - F.lit(t0)) / F.lit(NS_PER_S)).cast("long")


def load_table(spark: SparkSession, store: "RunStore", run_dir: str, name: str) -> DataFrame:
    """Read ledger table `name`; missing optional tables read as empty."""
    path = f"{run_dir}/{name}.parquet"
    if store.exists(path):
        return spark.read.schema(SCHEMAS[name]).parquet(path)
    if name in REQUIRED_TABLES:
        raise AnalysisInputError(f"{path}: ledger table missing; the run is incomplete")
    return spark.createDataFrame([], SCHEMAS[name])


def active_fault_ids(faults: Sequence[Mapping[str, Any]], start: Column, end: Column, end_ns: int) -> Column:
    """array<string> of the fault ids whose window [start_ns, heal_ns] overlaps [start, end]."""
    if not faults:
        return F.array().cast("array<string>")
    hits = [
        F.when((F.lit(f["start_ns"]) <= end) & (F.lit(f["heal_ns"] if f["heal_ns"] is not None else end_ns) >= start),
               F.lit(f["fault_id"]))
        for f in faults
    ]
    return F.array_compact(F.array(*hits))


# --------------------------------------------------------------------------- values

def value_observations(audit: DataFrame, reads: DataFrame, ctx: RunContext) -> DataFrame:
    """Per value id: where it sits in the final log and who read it (one shuffle)."""
    cols = ["value_id", "src", "partition", "offset", "gbit", "rc", "read_ns"]
    lc = audit.filter((F.col("isolation") == "read_committed") & (F.col("value_id") != -1)).select(
        "value_id", F.lit(1).alias("src"), "partition", "offset",
        F.lit(None).cast("long").alias("gbit"), F.lit(None).cast("int").alias("rc"), F.lit(None).cast("long").alias("read_ns"))
    group = _lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
    rc = _lookup_col(ctx.consumer_read_committed, "boolean", F.col("consumer"), True)
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
        _count(src == 1).alias("log_count"),
        F.min(F.when(src == 1, F.col("partition"))).alias("log_partition"),
        F.min(F.when(src == 1, F.col("offset"))).alias("log_offset"),
        F.max(F.when(src == 1, F.col("offset"))).alias("log_offset_max"),
        _count(src == 3).alias("read_count"),
        F.min(F.when(src == 3, F.col("partition"))).alias("read_partition_min"),
        F.max(F.when(src == 3, F.col("partition"))).alias("read_partition_max"),
        F.min(F.when(src == 3, F.col("offset"))).alias("read_offset_min"),
        F.max(F.when(src == 3, F.col("offset"))).alias("read_offset_max"),
        _count((src == 3) & (F.col("rc") == 1)).alias("read_rc_count"),
        F.bit_or(F.col("gbit")).alias("groups_mask"),
        F.min(F.when(src == 3, F.col("read_ns"))).alias("first_read_ns"),
        # When the last group to get the value first read it (the application-delivery claim).
        F.greatest(*[F.min(F.when((src == 3) & (F.col("gbit") == (1 << g)), F.col("read_ns")))
                     for g in range(len(ctx.groups))], F.lit(None).cast("long")).alias("delivered_ns"),
    )


def broker_offset(ctx: RunContext) -> Column:
    """`offset` of a send, null where its producer's reports carry no broker-assigned offset (acks=0)."""
    from_broker = _lookup_col(ctx.producer_broker_offsets, "boolean", F.col("producer"), True)
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
                  _lookup_col(ctx.producer_acks, "int", F.col("producer"), ctx.default_acks))
    expected = (outcome == "ok") & (F.col("txn_id").isNull() | (F.col("txn_outcome") == "commit"))
    complete = {p.partition: p.complete for p in ctx.partitions}
    high = {p.partition: p.high for p in ctx.partitions if p.high is not None}
    part = F.col("partition")
    known_part = part.isNotNull() & (part >= 0)
    part_complete = _lookup_col(complete, "boolean", part, False)
    below_high = F.col("ack_offset").isNull() | (F.col("ack_offset") < 0) | (
        F.col("ack_offset") < _lookup_col(high, "bigint", part, -1))
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
    v = v.withColumn("position_suspect", position_suspect())
    for c in ("lost", "lost_unconfirmed", "unseen", "duplicate", "observed_duplicate", "not_delivered", "aborted_read",
              "dirty_read", "indefinite_landed", "unknown_value", "undelivered", "position_suspect"):
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
        "dirty_read", "indefinite_landed", "unknown_value", "undelivered", "position_suspect", "observed_offsets",
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
            F.col("ack_offset").isNotNull() & (F.col("ack_offset") >= _lookup_col(high, "bigint", F.col("partition"), -1))
            & F.col("partition").isNotNull() & (F.col("partition") >= 0)
            & (_lookup_col(high, "bigint", F.col("partition"), -1) >= 0),
            F.format_string("acked at partition %s offset %s >= high watermark %s: the drain never reached it",
                            F.col("partition"), F.col("ack_offset"), _lookup_col(high, "bigint", F.col("partition"), -1)),
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


# --------------------------------------------------------------------------- causes

def unacknowledged_writes(rows: Iterable[Mapping[str, Any]], topic: str | None) -> list[dict[str, Any]]:
    """Pure: the writes the broker made but the client never heard of, one per partition write.

    From `proxy_events` rows whose phase is `response_dropped` (lost ack),
    `response_replaced` (an error answered after the broker appended) or
    `response_discarded` (an answer lost when the proxy reset the connection, or that
    a latency rule still held back when the client gave up; only those whose answer
    came, before the reset or after it, carry base offsets): each partition with a base offset
    >= 0 took offsets [base, base + record_count - 1] (only `base` when the count is
    unknown). Rows of other topics are ignored when `topic` is known; a write
    recorded twice is kept once (earliest).
    """
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["ts_ns"] or 0):
        if r["phase"] not in UNACKNOWLEDGED_WRITE_PHASES or not r["base_offsets"]:
            continue
        if topic is not None and r["topic"] is not None and r["topic"] != topic:
            continue
        counts = r["record_counts"] or []
        for i, (partition, base) in enumerate(zip(r["partitions"] or [], r["base_offsets"])):
            if base is None or base < 0:
                continue
            n = counts[i] if i < len(counts) and counts[i] is not None and counts[i] > 0 else 1
            out.setdefault((int(partition), int(base)), {
                "partition": int(partition), "first_offset": int(base), "last_offset": int(base) + n - 1,
                "cause_fault_id": r["fault_id"] or r["rule_id"], "action": r["action"], "phase": r["phase"],
                "broker": r["broker"], "conn": r["conn"], "correlation_id": r["correlation_id"], "ts_ns": r["ts_ns"],
            })
    return sorted(out.values(), key=lambda w: (w["partition"], w["first_offset"]))


def cause_text(write: Mapping[str, Any]) -> str:
    """Pure: one sentence naming the proxy action behind an attributed anomaly."""
    if write["phase"] == "response_discarded" and write["action"] == "latency":
        what = "the fault proxy held back until the client gave up on it (closed the connection)"
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


WRITES_SCHEMA = _schema(
    ("partition", _I32), ("first_offset", _I64), ("last_offset", _I64), ("cause_fault_id", _STR), ("cause", _STR),
)


def attribute_causes(spark: SparkSession, anomalies: DataFrame, writes: list[dict[str, Any]]) -> DataFrame:
    """Add `cause_fault_id`/`cause`: set on ATTRIBUTED_KINDS rows whose first log copy
    (`offset`) lies in an unacknowledged write of the same partition, or, for a duplicate,
    whose last copy does (the retry landed first: a request pipelined on a connection a
    reset broke was written after the client's retry on a new one), else null."""
    if not writes:
        return (anomalies.withColumn("cause_fault_id", F.lit(None).cast("string"))
                .withColumn("cause", F.lit(None).cast("string")))
    w = spark.createDataFrame([(x["partition"], x["first_offset"], x["last_offset"], x["cause_fault_id"],
                                cause_text(x)) for x in writes], WRITES_SCHEMA)
    later = w.select(*[F.col(c).alias(f"l_{c}") for c in w.columns])
    w = w.alias("w")
    a = anomalies.alias("a")
    hit = ((F.col("a.kind").isin(*ATTRIBUTED_KINDS)) & (F.col("a.partition") == F.col("w.partition"))
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


# --------------------------------------------------------------------------- offsets

def small_side(df: DataFrame, broadcast_limit: int) -> DataFrame:
    """`df` marked for a broadcast join when it has at most `broadcast_limit` rows (it is counted)."""
    return F.broadcast(df) if df.count() <= broadcast_limit else df


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
    group = _lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
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
    read_cols = [_count((src == 2) & (F.col("grp") == g)).alias(f"reads_{g}") for g in range(len(ctx.groups))]
    agg = obs.groupBy("partition", "offset").agg(
        F.min(vid).alias("vmin"), F.max(vid).alias("vmax"),
        F.min(F.when(src == 0, vid)).alias("ack_min"), F.max(F.when(src == 0, vid)).alias("ack_max"),
        # Every distinct value, not just the extremes: three or more can meet at one offset (one per
        # unclean election), and only suspect offsets are aggregated, so the sets stay small.
        F.array_sort(F.collect_set(F.when(src == 0, vid))).alias("ack_vids"),
        F.array_sort(F.collect_set(vid)).alias("vids"),
        _count(src == 0).alias("n_ack"),
        F.max(F.when(src == 1, vid)).alias("log_vid"), _count(src == 1).alias("n_log"),
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
    low = _lookup_col({p.partition: p.low for p in ctx.partitions if p.low is not None}, "bigint", F.col("partition"), 0)
    high = _lookup_col({p.partition: p.high for p in ctx.partitions if p.high is not None}, "bigint",
                       F.col("partition"), -1)
    complete = _lookup_col({p.partition: p.complete for p in ctx.partitions}, "boolean", F.col("partition"), False)
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


# --------------------------------------------------------------------------- polls

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
    rc = _lookup_col(ctx.consumer_read_committed, "boolean", F.col("consumer"), True)
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
    group_name = _lookup_col({i: ctx.groups[g] for i, g in ctx.consumer_group.items()}, "string",
                             F.col("consumer"), ctx.groups[0])
    return skips.unionByName(rewinds).unionByName(inversions).select(
        "kind", "value_id", F.when(F.col("value_id") >= 0, F.shiftright("value_id", 32)).cast("int").alias("producer"),
        "partition", "offset", F.array("prev_offset", "offset").alias("offsets"),
        F.lit(None).cast("array<bigint>").alias("value_ids"), "consumer", "consumer_pid", group_name.alias("group"),
        F.col("prev_read_ns").alias("t_start_ns"), F.col("read_ns").alias("t_end_ns"), "detail")


# --------------------------------------------------------------------------- latency / time

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
    group = _lookup_col(ctx.consumer_group, "int", F.col("consumer"), 0)
    code = F.when(ok, 0).when(F.col("outcome") == "fail", 1).otherwise(2)
    d = F.when(ok & F.col("complete_ns").isNotNull(), F.col("complete_ns") - F.col("send_ns"))
    # Three small aggregations; the driver folds them into seconds.
    # 1. by intended second and outcome, with the publish-latency histogram of acked sends
    intent = (sends.select(_second(F.col("intended_ns"), t0).alias("s"), code.alias("c"), d.alias("d"))
              .withColumn("us", _us(F.col("d")))
              .groupBy("s", "c", value_bucket(F.col("us"), TIMESERIES_DIGITS).alias("b"))
              .agg(F.count("*").alias("n"), (F.max("d") / NS_PER_MS).alias("mx")))
    # 2. by completion second and partition: acks/errors and the highest acked offset (log end)
    done = (sends.filter(F.col("complete_ns").isNotNull())
            .groupBy(_second(F.col("complete_ns"), t0).alias("s"), F.col("partition").alias("p"), ok.alias("ok"))
            .agg(F.count("*").alias("n"), F.max(F.when(ok & (F.col("offset") >= 0), F.col("offset"))).alias("o")))
    # 3. by read second, group and partition: reads and the highest offset read (position)
    rd = reads.groupBy(_second(F.col("read_ns"), t0).alias("s"), group.alias("g"), F.col("partition").alias("p")).agg(
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
        _count(~F.col("ok")).alias("errors"), _count(F.col("ok")).alias("acks")).collect()}
    last_err = {i: r["last_err"] for i, r in a.items() if r["last_err"] is not None}
    after_err = F.try_element_at(_int_map(last_err, "bigint"), F.col("idx"))
    after_heal = F.try_element_at(_int_map(heal, "bigint"), F.col("idx"))
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


# --------------------------------------------------------------------------- exercised

# Kinds of fault and what shows they took effect (docs/analysis.md "Was the check exercised?").
NODE_STATE_AFTER = {"kill": "dead", "stop": "dead", "pause": "paused"}
NFT_KINDS = ("isolate", "cut", "partition", "cut_clients", "packet_loss")
PROXY_FAULT_KINDS = ("lost_ack", "error", "latency", "proxy_bandwidth", "reset", "blackhole", "metadata",
                     "fetch_corrupt", "fetch_duplicate")
ROLLING_FAULT_KINDS = ("rolling_upgrade", "rolling_restart")
CLOCK_FAULT_KINDS = ("clock_skew",)
DISK_RULE_KINDS = ("disk_error", "disk_full", "disk_latency")


def power_loss_effect(effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a power loss took effect when every node it cut was dead afterwards; the evidence says what
    each node's disk dropped (nothing, when everything written had been fsynced)."""
    states = effect.get("node_states") or {}
    if not states:
        return False, "no node state was recorded after the power loss"
    lost = effect.get("power_loss") or {}

    def dropped(node: str) -> str:
        n_bytes, n_files = int((lost.get(node) or {}).get("bytes_dropped", 0)), int((lost.get(node) or {}).get("files", 0))
        return f"{n_bytes:,} unsynced bytes of {n_files} file{'' if n_files == 1 else 's'}"
    return all(v == "dead" for v in states.values()), "; ".join(
        f"node {n} {v}, its disk dropped {dropped(n)}" for n, v in sorted(states.items()))


def clock_effect(params: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a clock fault took effect when every node it targets holds the offset and runs with libfaketime
    loaded (so the offset reaches its JVM)."""
    clocks = effect.get("clocks") or {}
    if not clocks:
        return False, "no node clock was recorded"
    want = float(params.get("offset_s", 0))
    held = {n: bool(c.get("faketime_loaded")) and abs(float(c.get("offset_s", 0)) - want) < 0.001
            for n, c in clocks.items()}
    return all(held.values()), ", ".join(
        f"node {n} clock {float(c.get('offset_s', 0)):+g} s" + ("" if c.get("faketime_loaded") else " (libfaketime not loaded)")
        for n, c in sorted(clocks.items()))


def timestamp_regressions(audit: DataFrame, limit: int = 5) -> dict[str, Any]:
    """Records of the committed log whose timestamp is earlier than the record before them in their
    partition: a leader's clock that moved (LogAppendTime), or producers stamping from different clocks
    (CreateTime). Kafka allows it; time-based retention and timestamp lookups see it. Computed for runs
    with clock faults only (a sort of the whole log)."""
    log = audit.filter(F.col("isolation") == "read_committed").select("partition", "offset", "timestamp_ms")
    back = (log.withColumn("previous_ms", F.lag("timestamp_ms").over(Window.partitionBy("partition").orderBy("offset")))
            .filter(F.col("timestamp_ms") < F.col("previous_ms"))
            .withColumn("back_ms", F.col("previous_ms") - F.col("timestamp_ms"))).cache()
    total = back.agg(F.count("*").alias("n"), F.max("back_ms").alias("max_back_ms")).first()
    examples = [r.asDict() for r in back.orderBy(F.desc("back_ms"), "partition", "offset").limit(limit).collect()]
    back.unpersist()
    return {"regressions": int(total["n"]), "max_back_ms": total["max_back_ms"], "examples": examples}


def rolling_effect(kind: str, params: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a rolling fault took effect when every node it rolled came back on what it was rolled to
    (and, for a finalised upgrade, the release's features were finalised)."""
    rolled = effect.get("rolled") or {}
    if not rolled:
        return False, "no node was rolled"
    after = effect.get("versions_after") or {}
    want = params.get("version")
    off = sorted(n for n, step in rolled.items() if step.get("caught_up_s") is None
                 or (want is not None and after.get(n) != want))
    evidence = f"{len(rolled)} nodes rolled" + (f" to Kafka {want}" if want else "") + (
        f"; nodes {', '.join(off)} did not come back on it" if off else "")
    finalized = True
    if want is not None and params.get("finalize", True):
        finalized = bool((effect.get("finalized") or {}).get("finalized"))
        evidence += "; features finalised" if finalized else "; features NOT finalised"
    return not off and finalized, evidence


def fault_effect(fault: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: whether one injected fault observably took effect, and the evidence, from its `effect` record."""
    effect = json.loads(fault.get("effect") or "{}")
    kind, target = fault["kind"], fault.get("target") or ""
    if target.startswith("consumer:"):
        want = "paused" if kind == "pause" else "dead"
        state = effect.get("consumer_state")
        restarted = effect.get("consumer_restarted")
        held = state == want and (kind == "pause" or restarted is not False)
        return held, (f"consumer process {state or 'state not recorded'} after the {kind}"
                      + ("" if kind == "pause" else
                         f"; {'restarted' if restarted else 'not restarted' if restarted is False else 'restart not recorded'}"))
    if kind == "power_loss":
        return power_loss_effect(effect)
    if kind in DISK_RULE_KINDS:
        n = effect.get("disk_fired")
        return bool(n), ("the disk rule's count was not recorded" if n is None else
                         f"the disk rule {'slowed' if kind == 'disk_latency' else 'failed'} {n} "
                         f"operation{'' if n == 1 else 's'}")
    if kind in NODE_STATE_AFTER:
        states = effect.get("node_states") or {}
        want = NODE_STATE_AFTER[kind]
        if not states:
            return False, "no node state was recorded after the injection"
        return all(v == want for v in states.values()), ", ".join(f"node {n} {v}" for n, v in sorted(states.items()))
    if kind == "restart":
        restarted = effect.get("restarted") or {}
        if not restarted:
            return False, "no restart was recorded"
        return all(restarted.values()), ", ".join(f"node {n} {'restarted' if v else 'NOT restarted'}"
                                                  for n, v in sorted(restarted.items()))
    if kind in NFT_KINDS:
        n = effect.get("dropped_packets")
        return bool(n), ("no packet counts were recorded" if n is None else f"its rules dropped {n} packets")
    if kind == "bandwidth":
        held_back = (effect.get("tbf_overlimits") or 0) + (effect.get("tbf_dropped") or 0)
        return held_back > 0, f"the token buckets held back {held_back} packets"
    if kind in PROXY_FAULT_KINDS:
        n = effect.get("proxy_fired", fault.get("proxy_fired"))
        return bool(n), ("the proxy rule's count was not recorded" if n is None else f"the proxy rule fired {n} times")
    if kind in ROLLING_FAULT_KINDS:
        return rolling_effect(kind, json.loads(fault.get("params") or "{}"), effect)
    if kind in CLOCK_FAULT_KINDS:
        return clock_effect(json.loads(fault.get("params") or "{}"), effect)
    if kind == "roll_node":
        step = effect.get("step")
        if not step:
            return False, f"the node did not come back: {effect.get('effect_error') or 'no step was recorded'}"
        return (step["caught_up_s"] is not None,
                f"{step['version_before']} → {step['version_after']}, serving again {step['caught_up_s']}s after its start")
    if kind == "finalize_features":
        step = effect.get("step") or {}
        return bool(step.get("finalized")), (f"release {step['release']} finalised" if step.get("finalized") else
                                             f"not finalised: {effect.get('effect_error') or 'no result recorded'}")
    return False, f"kafkaproof has no check for fault kind {kind!r}"


def exercise_results(faults: Sequence[Mapping[str, Any]], conditions: Sequence[Mapping[str, Any]],
                     snapshots: Sequence[Mapping[str, Any]], proxy_phases: Mapping[str, int],
                     incarnations: Mapping[int, int], aborted_in_log: int, outcomes: Mapping[str, int],
                     t0: int) -> list[dict[str, Any]]:
    """Pure: one result per injected fault (did it take effect?) and per condition the scenario states.

    Each is `{check, subject, held, evidence}`; a condition not held makes the run an error.
    """
    out = []
    for f in faults:
        held, evidence = fault_effect(f)
        out.append({"check": "fault_took_effect", "subject": f"{f['kind']} {f.get('target') or ''} ({f['fault_id']})",
                    "fault_id": f["fault_id"], "held": held, "evidence": evidence})
    by_index = {}
    for f in faults:
        idx = (json.loads(f.get("effect") or "{}")).get("scenario_index")
        if idx is not None:
            by_index.setdefault(int(idx), f)
    snaps = sorted(snapshots, key=lambda r: r["ts_ns"])

    def rel(ns: int) -> str:
        return f"t={(ns - t0) / NS_PER_S:.1f}s"

    for c in conditions:
        check = c["check"]
        held, evidence, subject = False, "", ""
        if check == "leader_change":
            p = c["partition"]
            subject = f"partition {p}"
            seen = [(r["ts_ns"], r["leader"]) for r in snaps if r["partition"] == p]
            changes = [(ts, a, b) for (_, a), (ts, b) in zip(seen, seen[1:]) if a != b]
            held = bool(changes)
            evidence = ("; ".join(f"leader {a} -> {b} at {rel(ts)}" for ts, a, b in changes[:5]) if changes
                        else f"leader stayed {seen[0][1] if seen else 'unknown'} in {len(seen)} snapshots")
        elif check == "isr_shrink":
            p = c["partition"]
            subject = f"partition {p}"
            limit, before = None, ""
            if "before_fault" in c:
                f = by_index.get(int(c["before_fault"]))
                limit = f["start_ns"] if f else None
                before = f" before faults[{c['before_fault']}]" + ("" if f else " (never injected)")
            shrunk = [r for r in snaps if r["partition"] == p and len(r["isr"] or []) < len(r["replicas"] or [])
                      and (limit is None or r["ts_ns"] < limit)]
            held = bool(shrunk) and not ("before_fault" in c and limit is None)
            evidence = (f"ISR {list(shrunk[0]['isr'])} of replicas {list(shrunk[0]['replicas'])} at "
                        f"{rel(shrunk[0]['ts_ns'])}{before}" if shrunk else f"the ISR never shrank{before}")
        elif check == "proxy_phase":
            n, want = int(proxy_phases.get(c["phase"], 0)), int(c.get("min", 1))
            subject, held = c["phase"], n >= want
            evidence = f"{n} proxy events in phase {c['phase']} (need {want})"
        elif check == "aborted_in_log":
            want = int(c.get("min", 1))
            subject, held = "aborted transactions", aborted_in_log >= want
            evidence = f"{aborted_in_log} records of aborted transactions in the log (need {want})"
        elif check == "consumer_restarted":
            i = c["consumer"]
            n = incarnations.get(i, 0)
            subject, held = f"consumer {i}", n >= 1
            evidence = f"{n + 1} process(es) of consumer {i} ran"
        elif check == "send_errors":
            which, want = c.get("outcome", "any"), int(c.get("min", 1))
            n = (outcomes.get("failed", 0) + outcomes.get("indefinite", 0) if which == "any"
                 else outcomes.get("failed" if which == "fail" else "indefinite", 0))
            subject, held = f"{which} sends", n >= want
            evidence = f"{n} {which} sends (need {want})"
        else:
            evidence = f"unknown check {check!r}"
        out.append({"check": check, "subject": subject, "fault_id": None, "held": held, "evidence": evidence,
                    **({"why": c["why"]} if c.get("why") else {})})
    return out


# --------------------------------------------------------------------------- driver

def location(run_dir: str) -> str:
    """Pure: a run directory as the job addresses it: a URI as given, a local path as an absolute
    `file:` URI (so a cluster whose default filesystem is HDFS still reads it locally)."""
    text = str(run_dir).rstrip("/") or "/"
    if "://" in text or text.startswith("file:"):
        return text
    return "file://" + os.path.abspath(text)


def location_name(uri: str) -> str:
    """Pure: the last segment of a location (the run id of a run directory)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


class RunStore:
    """Files of the job through Hadoop's FileSystem API (whatever scheme a location has).

    The driver never opens a run directory itself: on a cluster, or with `--deploy-mode cluster`,
    its own disk is not where the runs are.
    """

    def __init__(self, spark: SparkSession):
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, uri: str):
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path, path.getFileSystem(self._conf)

    def exists(self, uri: str) -> bool:
        path, fs = self._fs(uri)
        return bool(fs.exists(path))

    def read_text(self, uri: str) -> str:
        path, fs = self._fs(uri)
        stream = fs.open(path)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    def write_text(self, uri: str, text: str) -> None:
        path, fs = self._fs(uri)
        out = fs.create(path, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def delete(self, uri: str) -> None:
        path, fs = self._fs(uri)
        fs.delete(path, True)

    def replace(self, src: str, dst: str) -> None:
        """Publish directory `src` as `dst` (an older `dst` goes first)."""
        self.delete(dst)
        source, fs = self._fs(src)
        if not fs.rename(source, self._jvm.org.apache.hadoop.fs.Path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def parquet_rows(self, run_dir: str) -> int:
        """Rows of the Parquet files (or directories of them) directly in `run_dir`, from their footers."""
        jvm = self._jvm
        _, fs = self._fs(run_dir)
        rows = 0
        for status in fs.globStatus(jvm.org.apache.hadoop.fs.Path(f"{run_dir}/*.parquet")) or []:
            files = ([status] if status.isFile() else
                     [f for f in fs.listStatus(status.getPath()) if f.isFile() and f.getPath().getName().endswith(".parquet")])
            for f in files:
                reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
                    jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(f, self._conf))
                try:
                    rows += reader.getRecordCount()
                finally:
                    reader.close()
        return rows


def read_manifest(store: RunStore, run_dir: str) -> dict[str, Any]:
    path = f"{run_dir}/manifest.json"
    if not store.exists(path):
        raise AnalysisInputError(f"{path}: no manifest; {run_dir} is not a kafkaproof run directory")
    return json.loads(store.read_text(path))


def _write(df: DataFrame, path: str, files: int | None = 1, dictionary: bool = True) -> DataFrame:
    """Write `df` as Parquet and return it read back (with its schema: no inference job)."""
    writer = (df.coalesce(files) if files else df).write.mode("overwrite")
    if not dictionary:
        # Mostly unique columns: trying dictionaries first costs a third of the write.
        writer = writer.option("parquet.enable.dictionary", "false")
    writer.parquet(path)
    return df.sparkSession.read.schema(df.schema).parquet(path)


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
        _count(F.col("sent")).alias("sent"), _count(F.col("outcome") == "ok").alias("acked"),
        _count(F.col("outcome") == "fail").alias("failed"), _count(F.col("outcome") == "indefinite").alias("indefinite"),
        _count(F.col("read_count") > 0).alias("consumed"), _count(F.col("log_count") > 0).alias("in_log"),
        _count(F.col("expected")).alias("expected"),
    ).crossJoin(audit.agg(
        _count(iso == "read_uncommitted").alias("log_records"),
        _count((iso == "read_uncommitted") & (F.col("value_id") == -1)).alias("foreign_records"),
        _count(iso == "read_committed").alias("log_records_committed"),
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

    values = _write(classify_values(sends, value_observations(audit, reads, ctx), ctx, last_heal_ns),
                    f"{tmp}/values.parquet", files=None, dictionary=False)
    clock.mark("values")

    anomalies = (value_anomalies(values, ctx)
                 .unionByName(reorder_anomalies(values))
                 .unionByName(offset_anomalies(sends, audit, reads, ctx, values))
                 .unionByName(poll_anomalies(reads, tables["consumer_events"], audit, ctx)))
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
    anomalies = _write(anomalies.repartition(1).sortWithinPartitions("kind", "partition", "offset", "value_id"),
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
        "claims": {} if ctx.delivery_within_s is None else {"delivery": {
            "within_s": ctx.delivery_within_s, "undelivered": counts["undelivered_attempts"],
            "last_heal_s": None if last_heal_ns is None else (last_heal_ns - t0) / NS_PER_S,
            "leaderless_windows": [{**w, "start_s": (w["start_ns"] - t0) / NS_PER_S,
                                    "end_s": (w["end_ns"] - t0) / NS_PER_S} for w in leaderless]}},
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


if __name__ == "__main__":
    sys.exit(main())
