"""The ledger: Parquet schemas of a run directory and helpers to write and read them.

`docs/ledger-schema.md` documents every column; keep the two in step.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import LedgerError
from ..paths import write_text_atomic
from .pipeline_ledger import PIPELINE_TABLES
from .share_ledger import SHARE_TABLES

VALUE_ID_PRODUCER_SHIFT = 32
PAYLOAD_PREFIX = "kp"

SENDS = pa.schema([
    ("value_id", pa.int64()),
    ("producer", pa.int32()),
    ("producer_pid", pa.int32()),
    ("seq", pa.int64()),
    ("key", pa.string()),
    ("partition", pa.int32()),
    ("intended_ns", pa.int64()),
    ("send_ns", pa.int64()),
    ("complete_ns", pa.int64()),
    ("outcome", pa.string()),
    ("offset", pa.int64()),
    ("error_code", pa.int32()),
    ("error_name", pa.string()),
    ("txn_id", pa.int64()),
    ("txn_outcome", pa.string()),
    ("error_message", pa.string()),  # the client's words: librdkafka's error string, the Java exception's message
])

READS = pa.schema([
    ("consumer", pa.int32()),
    ("consumer_pid", pa.int32()),
    ("incarnation", pa.int32()),
    ("generation", pa.int32()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("key", pa.string()),
    ("value_id", pa.int64()),
    ("read_ns", pa.int64()),
    ("poll_id", pa.int64()),
    # Appended last (older readers and the Java driver's TSV keep their column order); null in older runs.
    ("poll_seq", pa.int32()),  # position of the record in what its poll returned, in the client's order
])

CONSUMER_EVENTS = pa.schema([
    ("consumer", pa.int32()),
    ("consumer_pid", pa.int32()),
    ("incarnation", pa.int32()),
    ("ts_ns", pa.int64()),
    ("event", pa.string()),
    ("partitions", pa.list_(pa.int32())),
    ("offsets", pa.list_(pa.int64())),
    ("success", pa.bool_()),
    ("error", pa.string()),
    # assign/revoke/lost: the process's whole assignment after the event (a cooperative rebalance
    # names only the partitions it moves); null for other events and in runs before the column.
    ("assigned", pa.list_(pa.int32())),
])

AUDIT = pa.schema([
    ("isolation", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("key", pa.string()),
    ("value_id", pa.int64()),
    ("timestamp_ms", pa.int64()),
])

FAULTS = pa.schema([
    ("fault_id", pa.string()),
    ("kind", pa.string()),
    ("target", pa.string()),
    ("nodes", pa.list_(pa.int32())),
    ("params", pa.string()),
    ("start_ns", pa.int64()),
    ("heal_ns", pa.int64()),
    ("start_wall", pa.string()),
    ("heal_wall", pa.string()),
    # Proxy faults only (null otherwise); appended last so older readers keep working.
    ("proxy_rule", pa.string()),
    ("proxy_fired", pa.int64()),
    # JSON: what the fault observably did (node states after injection, packets dropped, proxy
    # rule fired, the trigger it waited for); the analysis checks it took effect.
    ("effect", pa.string()),
])

# One row per action the fault proxies took on a request (their `fault` events).
PROXY_EVENTS = pa.schema([
    ("ts_ns", pa.int64()),
    ("fault_id", pa.string()),
    ("rule_id", pa.string()),
    ("broker", pa.int32()),
    ("proxy", pa.string()),
    ("conn", pa.int64()),
    ("client_id", pa.string()),
    ("api", pa.string()),
    ("api_key", pa.int32()),
    ("api_version", pa.int32()),
    ("correlation_id", pa.int32()),
    ("action", pa.string()),
    ("phase", pa.string()),
    ("topic", pa.string()),
    ("partitions", pa.list_(pa.int32())),
    ("base_offsets", pa.list_(pa.int64())),
    ("error_code", pa.int32()),
    ("delay_ms", pa.float64()),
    ("detail", pa.string()),
    ("record_counts", pa.list_(pa.int32())),
])

CLUSTER_SNAPSHOTS = pa.schema([
    ("ts_ns", pa.int64()),
    ("partition", pa.int32()),
    ("leader", pa.int32()),
    ("replicas", pa.list_(pa.int32())),
    ("isr", pa.list_(pa.int32())),
    ("controller", pa.int32()),
    ("live_nodes", pa.list_(pa.int32())),
    ("node_versions", pa.string()),  # JSON {node id: Kafka version}; a rolling upgrade changes it node by node
])

TABLES: dict[str, pa.Schema] = {
    "sends": SENDS,
    "reads": READS,
    "consumer_events": CONSUMER_EVENTS,
    "audit": AUDIT,
    "faults": FAULTS,
    "cluster_snapshots": CLUSTER_SNAPSHOTS,
    "proxy_events": PROXY_EVENTS,
    **PIPELINE_TABLES,  # an exactly-once pipeline's (spec/pipeline_ledger.py)
    **SHARE_TABLES,  # a share group's (spec/share_ledger.py)
}
# Tables that runs written before they existed lack: read as empty.
OPTIONAL_TABLES = ("proxy_events", *PIPELINE_TABLES, *SHARE_TABLES)

# What the fault proxies handed the application's consumers in Fetch answers (an application run through
# proxies, `run/delivered.py`): one row per record handed over, repeats included.
DELIVERED = pa.schema([
    ("broker", pa.int32()),         # the broker whose proxy handed it over
    ("conn", pa.int64()),           # the proxy's connection id (one per client connection)
    ("client_id", pa.string()),     # the client id of the Fetch request
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp_ms", pa.int64()),   # the record's own timestamp
    ("delivered_ms", pa.int64()),   # wall clock (epoch ms) when the proxy wrote the answer to the client
    ("event_id", pa.string()),      # the application's identity of the record; null when unreadable
    ("value_id", pa.int64()),       # the run's value id of that event; -1 when not one of the run's events
])

# Tables of a run directory beside the analysis' inputs (`TABLES`): the Spark job does not read them, and
# a run without them (e.g. no proxies) reads them as empty.
SIDE_TABLES: dict[str, pa.Schema] = {"delivered": DELIVERED}

SEND_OUTCOMES = ("ok", "fail", "indefinite")
MANIFEST = "manifest.json"


def make_value_id(producer: int, seq: int) -> int:
    """Return the run-unique id of a producer's `seq`-th value."""
    return (producer << VALUE_ID_PRODUCER_SHIFT) + seq


def split_value_id(value_id: int) -> tuple[int, int]:
    """Inverse of `make_value_id`: (producer, seq)."""
    return value_id >> VALUE_ID_PRODUCER_SHIFT, value_id & ((1 << VALUE_ID_PRODUCER_SHIFT) - 1)


def encode_payload(run_id: str, value_id: int, size: int) -> bytes:
    """Build a message value carrying its identity, padded to at least `size` bytes."""
    head = f"{PAYLOAD_PREFIX}|{run_id}|{value_id}|".encode()
    return head + b"x" * max(0, size - len(head))


def decode_value_id(payload: bytes | None, run_id: str | None = None) -> int:
    """Recover the value id from a payload; -1 for foreign or malformed data."""
    if not payload or not payload.startswith(b"kp|"):
        return -1
    parts = payload.split(b"|", 3)
    if len(parts) < 4:
        return -1
    if run_id is not None and parts[1].decode(errors="replace") != run_id:
        return -1
    try:
        return int(parts[2])
    except ValueError:
        return -1


def schema_of(name: str) -> pa.Schema:
    """The schema of ledger table `name` (an analysis input or a side table)."""
    schema = TABLES.get(name) or SIDE_TABLES.get(name)
    if schema is None:
        raise LedgerError(f"unknown ledger table {name!r}; known: {', '.join([*TABLES, *SIDE_TABLES])}")
    return schema


def table_path(run_dir: Path, name: str) -> Path:
    """Path of ledger table `name` inside a run directory."""
    schema_of(name)
    return Path(run_dir) / f"{name}.parquet"


def write_table(run_dir: Path, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write `rows` (dicts keyed by column) as ledger table `name`; returns the row count."""
    schema = schema_of(name)
    rows = list(rows)
    columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
    table = pa.Table.from_pydict(columns, schema=schema)
    write_arrow(run_dir, name, table)
    return table.num_rows


def write_arrow(run_dir: Path, name: str, table: pa.Table) -> None:
    """Write an Arrow table as ledger table `name`, cast to the contract schema."""
    path = table_path(run_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = schema_of(name)
    table = table.select([f.name for f in schema]).cast(schema)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def read_table(run_dir: Path, name: str) -> pa.Table:
    """Read ledger table `name`; raises LedgerError naming the file when missing."""
    path = table_path(run_dir, name)
    if not path.exists():
        if name in OPTIONAL_TABLES or name in SIDE_TABLES:
            return schema_of(name).empty_table()
        raise LedgerError(f"{path}: ledger table missing (was the run interrupted?)")
    return pq.read_table(path, schema=schema_of(name))


def write_manifest(run_dir: Path, manifest: Mapping[str, Any]) -> None:
    """Atomically write `manifest.json`."""
    write_text_atomic(Path(run_dir) / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str))


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """Read `manifest.json` of a run directory."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        raise LedgerError(f"{path}: no manifest; {run_dir} is not a kafkaproof run directory")
    return json.loads(path.read_text())
