"""The ledger of an exactly-once pipeline (issue 43): a read-process-write copier's transactions.

A copier consumes the input topic (the scenario topic: `sends`/`audit` hold its values), produces one output
per input (keeping its value id) to the output topic and commits the input offsets inside the transaction
(`sendOffsetsToTransaction`). Five tables, all optional: a run without them cannot judge the
`exactly_once_pipeline` claim (not applicable, never passed). `kafkaproof.spec.ledger` registers them with
the other tables; docs/ledger-schema.md documents every column; keep the three in step.
"""
from __future__ import annotations

import pyarrow as pa

TXN_OUTCOMES = ("committed", "aborted", "indefinite")
RECORD_ROLES = ("input", "output")

# One row per transaction a copier began.
TRANSACTIONS = pa.schema([
    ("txn", pa.int64()),               # run-unique transaction number (the other tables' key)
    ("transactional_id", pa.string()),
    ("copier", pa.int32()),            # copier instance (a restarted copier keeps its index and transactional id)
    ("producer_id", pa.int64()),
    ("epoch", pa.int32()),             # producer epoch (a restart with the same transactional.id bumps it)
    ("txn_seq", pa.int64()),           # the copier's n-th transaction
    ("outcome", pa.string()),          # committed | aborted | indefinite (the client got no definite answer)
    ("begin_ns", pa.int64()),
    ("commit_ns", pa.int64()),         # commitTransaction called (null: never asked to commit)
    ("end_ns", pa.int64()),            # commit/abort returned (null: the transaction never ended)
])

# One row per input a transaction consumed and per output it produced.
TRANSACTION_RECORDS = pa.schema([
    ("txn", pa.int64()),
    ("role", pa.string()),             # input | output
    ("partition", pa.int32()),         # input: the input partition; output: the output partition
    ("offset", pa.int64()),            # input: its offset; output: from the delivery report (null: unknown)
    ("value_id", pa.int64()),          # an output keeps its input's value id
])

# One row per record a downstream consumer of the output topic read.
OUTPUT_READS = pa.schema([
    ("reader", pa.int32()),
    ("isolation", pa.string()),        # read_committed | read_uncommitted
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("value_id", pa.int64()),
    ("read_ns", pa.int64()),
])

# The output topic's log after the faults healed, read with read_uncommitted: every record once.
OUTPUT_AUDIT = pa.schema([
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("value_id", pa.int64()),
    ("txn", pa.int64()),               # the transaction that wrote it (null: unknown)
    ("committed", pa.bool_()),         # its transaction's marker: true commit, false abort, null none/unknown
])

# Input partitions' committed offsets (the group's): at the end (txn null) and per transaction.
PIPELINE_PARTITIONS = pa.schema([
    ("partition", pa.int32()),
    ("txn", pa.int64()),               # null: the group's committed offset when the run ended
    ("committed_offset", pa.int64()),  # the next offset to consume
])

PIPELINE_TABLES: dict[str, pa.Schema] = {
    "transactions": TRANSACTIONS,
    "transaction_records": TRANSACTION_RECORDS,
    "output_reads": OUTPUT_READS,
    "output_audit": OUTPUT_AUDIT,
    "pipeline_partitions": PIPELINE_PARTITIONS,
}


# The scenario's `claims.exactly_once_pipeline` (spec/scenario.py's schema): what the claim says, beside its ledger.
CLAIM_SCHEMA: dict = {
    "type": "object", "additionalProperties": False, "properties": {},
    "description": "a read-process-write copier is exactly once: every input value of a committed transaction in "
                   "the committed output once, read_committed readers see no aborted or uncommitted output, "
                   "committed input offsets agree with committed outputs, no transaction hangs; judged on the "
                   "pipeline ledger (not applicable without it, never a pass)"}
