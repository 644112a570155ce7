"""The ledger of a share-group workload (issue 46, KIP-932): every delivery and acknowledgement of a share group.

N share consumers (`KafkaShareConsumer`) of one share group read the scenario topic (`sends`/`audit` hold its
values). Each record a poll returns is one *delivery* (the broker acquired it for that consumer and reported its
delivery count); each acknowledgement the consumer sent for it is one *ack*. Three tables, all optional: a run
without them cannot judge the claim `share_group` (not applicable, never passed). `kafkaproof.spec.ledger`
registers them with the other tables; docs/ledger-schema.md documents every column; keep the three in step.
"""
from __future__ import annotations

import pyarrow as pa

ACK_TYPES = ("accept", "release", "reject")
MEMBER_EVENTS = ("start", "stop", "killed")

# One row per record a share consumer's poll returned (an acquisition).
SHARE_DELIVERIES = pa.schema([
    ("delivery_id", pa.int64()),       # run-unique (consumer process, n-th delivery): share_acks' key
    ("consumer", pa.int32()),          # consumer instance (a restarted consumer keeps its index)
    ("consumer_pid", pa.int32()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("value_id", pa.int64()),
    ("delivery_count", pa.int32()),    # the delivery count the broker reported (ConsumerRecord.deliveryCount)
    ("acquired_ns", pa.int64()),       # the poll returned it: the acquisition lock started at the latest here
])

# One row per acknowledgement a share consumer sent for a delivery (implicit mode: one accept per record).
SHARE_ACKS = pa.schema([
    ("delivery_id", pa.int64()),
    ("consumer", pa.int32()),
    ("consumer_pid", pa.int32()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("type", pa.string()),             # accept | release | reject
    ("ack_ns", pa.int64()),            # the acknowledgement's commit completed (commitSync or its callback)
    ("success", pa.bool_()),           # the broker confirmed it
    ("error", pa.string()),            # the client's exception when not (null on success)
])

# The members' lifecycle: a killed member's deliveries end by the lock timeout.
SHARE_MEMBERS = pa.schema([
    ("consumer", pa.int32()),
    ("consumer_pid", pa.int32()),
    ("group", pa.string()),            # the share group's id
    ("member_id", pa.string()),        # the member id the client reported (null: unknown)
    ("event", pa.string()),            # start | stop | killed
    ("ts_ns", pa.int64()),
])

SHARE_TABLES: dict[str, pa.Schema] = {
    "share_deliveries": SHARE_DELIVERIES,
    "share_acks": SHARE_ACKS,
    "share_members": SHARE_MEMBERS,
}

# Kafka's defaults (group.share.delivery.count.limit, group.share.record.lock.duration.ms).
DEFAULT_DELIVERY_LIMIT = 5
DEFAULT_LOCK_TIMEOUT_MS = 30_000

# The scenario's `claims.share_group` (spec/scenario.py's schema): what the claim says, beside its ledger.
CLAIM_SCHEMA: dict = {
    "type": "object", "additionalProperties": False, "properties": {},
    "description": "a share group (KIP-932) delivers as it promises: every record in the log accepted exactly once, "
                   "rejected, or given up at the delivery limit; no record held by two consumers at once; delivery "
                   "counts +1 per redelivery and never above the limit; released records come back, rejected ones "
                   "never; judged on the share ledger (not applicable without it, never a pass)"}
