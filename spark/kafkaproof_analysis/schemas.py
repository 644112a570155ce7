"""Spark schemas of the ledger tables the job reads and of the tables it writes.

`SCHEMAS` mirrors plugins/kafkaproof/spec/ledger.py (the columns the job uses, with their types);
tests/unit/analysis/test_job_package.py fails when the two drift.
"""
from __future__ import annotations

from pyspark.sql import types as T


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
        ("partitions", T.ArrayType(_I32)), ("base_offsets", T.ArrayType(_I64)), ("detail", _STR),
        ("record_counts", T.ArrayType(_I32)),
    ),
    # An exactly-once pipeline's (spec/pipeline_ledger.py); a run has all five or none (pipeline.py).
    "transactions": _schema(
        ("txn", _I64), ("transactional_id", _STR), ("copier", _I32), ("producer_id", _I64), ("epoch", _I32),
        ("txn_seq", _I64), ("outcome", _STR), ("begin_ns", _I64), ("commit_ns", _I64), ("end_ns", _I64),
    ),
    "transaction_records": _schema(
        ("txn", _I64), ("role", _STR), ("partition", _I32), ("offset", _I64), ("value_id", _I64),
    ),
    "output_reads": _schema(
        ("reader", _I32), ("isolation", _STR), ("partition", _I32), ("offset", _I64), ("value_id", _I64),
        ("read_ns", _I64),
    ),
    "output_audit": _schema(
        ("partition", _I32), ("offset", _I64), ("value_id", _I64), ("txn", _I64), ("committed", _BOOL),
    ),
    "pipeline_partitions": _schema(("partition", _I32), ("txn", _I64), ("committed_offset", _I64)),
    # A share group's (spec/share_ledger.py); a run has all three or none (share.py).
    "share_deliveries": _schema(
        ("delivery_id", _I64), ("consumer", _I32), ("consumer_pid", _I32), ("partition", _I32), ("offset", _I64),
        ("value_id", _I64), ("delivery_count", _I32), ("acquired_ns", _I64),
    ),
    "share_acks": _schema(
        ("delivery_id", _I64), ("consumer", _I32), ("consumer_pid", _I32), ("partition", _I32), ("offset", _I64),
        ("type", _STR), ("ack_ns", _I64), ("success", _BOOL), ("error", _STR),
    ),
    "share_members": _schema(
        ("consumer", _I32), ("consumer_pid", _I32), ("group", _STR), ("member_id", _STR), ("event", _STR),
        ("ts_ns", _I64),
    ),
}
REQUIRED_TABLES = ("sends", "audit")
PIPELINE_TABLES = ("transactions", "transaction_records", "output_reads", "output_audit", "pipeline_partitions")
SHARE_TABLES = ("share_deliveries", "share_acks", "share_members")

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

WRITES_SCHEMA = _schema(
    ("partition", _I32), ("first_offset", _I64), ("last_offset", _I64), ("cause_fault_id", _STR), ("cause", _STR),
    ("duplicates_only", _BOOL),
)
