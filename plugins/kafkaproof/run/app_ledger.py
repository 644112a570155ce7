"""Application events in the ledger (issue 39): the HTTP driver's requests as sends, event ids as value ids.

A run uses it through `run/app_run.py`. The application under test is a black box: kafkaproof knows the
answer to each request (`run/http_driver.py`'s `HTTP_SENDS`), recognises its events in Kafka records
by their identity (`spec.application.Identity`) and sees what its consumer side processed
(`run/processed.py`). This module maps all of that onto the existing ledger so the Spark job and the
GX suites judge it unchanged:

- `sends_from_http`: one SENDS row per request; the application's outcome as the send's outcome.
  Nothing in an HTTP answer says where the event went, so `partition` is -1 (never known) and
  `offset` null: the job's offset and position checks have no ack to compare (`not_applicable`).
- `event_index` / `value_id_of`: event id -> value id, and a record decoder for the drain that gives
  -1 (counted) for a record whose identity cannot be read or whose id is not one of the run's events.
- `not_applicable`: the anomaly checks the application's data cannot judge, each with the reason,
  so a report shows them as not applicable rather than as passed.

Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol

import pyarrow as pa

from ..spec.anomalies import KINDS
from ..spec.application import ACCEPTED, INDEFINITE, REJECTED
from ..spec.ledger import SENDS, make_value_id

# The application's outcome -> the ledger's (spec.ledger.SEND_OUTCOMES). A rejected request is the
# application saying it did not take the event: `fail`, so the event in the log is an aborted_read.
SEND_OUTCOME = {ACCEPTED: "ok", REJECTED: "fail", INDEFINITE: "indefinite"}
UNKNOWN_PARTITION = -1  # docs/ledger-schema.md: sends.partition is -1 when never known


class IdentityReader(Protocol):
    """What the decoder needs of `spec.application.Identity`."""

    def read(self, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None) -> str | None: ...


def _producers(table: pa.Table, producer: int, per_worker: bool) -> list[int]:
    if not per_worker:
        return [producer] * table.num_rows
    return [producer + w for w in table.column("worker").to_pylist()]


def _value_ids(table: pa.Table, producer: int, per_worker: bool) -> list[int]:
    return [make_value_id(p, s) for p, s in zip(_producers(table, producer, per_worker),
                                                  table.column("seq").to_pylist())]


def http_error_name(status: int | None, failure: str | None, outcome: str) -> str | None:
    """Pure: the sends `error_name` of one request: null when accepted, `HTTP <status>` for a non-2xx
    answer, else the failure kind (`timeout`, `reset`, `refused`)."""
    if outcome == ACCEPTED:
        return None
    return f"HTTP {status}" if status is not None else failure


def sends_from_http(table: pa.Table, producer: int = 0, *, per_worker: bool = False,
                    clock_offset_ns: int = 0) -> pa.Table:
    """Pure: the ledger's SENDS rows of an `HTTP_SENDS` table, one per request, in its order.

    value_id = make_value_id(producer, seq); with `per_worker`, the producer is `producer + worker`
    instead, so each driver worker is a producer of its own: a worker sends its next request only
    after the previous one was answered, so the job's reordering check (a producer's acked values by
    seq) then compares causally ordered requests only. outcome: accepted -> ok, rejected -> fail,
    indefinite -> indefinite. error_code is the HTTP status of a non-2xx answer, error_name
    `HTTP <status>` or the failure kind, error_message the driver's. partition -1 and offset, key,
    producer_pid, txn_id, txn_outcome null. Times minus `clock_offset_ns` (the driver's clock is
    wall-clock anchored: pass the manifest's wall_origin_ns - monotonic_origin_ns to put them on the
    ledger's monotonic clock). ValueError for an outcome that is not the driver's."""
    outcomes = table.column("outcome").to_pylist()
    unknown = sorted({o for o in outcomes if o not in SEND_OUTCOME}, key=str)
    if unknown:
        raise ValueError(f"HTTP_SENDS.outcome: {unknown[0]!r} is not an outcome; allowed: {', '.join(SEND_OUTCOME)}")
    statuses = table.column("status").to_pylist()
    failures = table.column("failure").to_pylist()

    def shifted(name: str) -> list[int | None]:
        return [None if t is None else t - clock_offset_ns for t in table.column(name).to_pylist()]
    n = table.num_rows
    columns = {
        "value_id": _value_ids(table, producer, per_worker),
        "producer": _producers(table, producer, per_worker),
        "producer_pid": [None] * n,
        "seq": table.column("seq").to_pylist(),
        "key": [None] * n,
        "partition": [UNKNOWN_PARTITION] * n,
        "intended_ns": shifted("intended_ns"),
        "send_ns": shifted("send_ns"),
        "complete_ns": shifted("complete_ns"),
        "outcome": [SEND_OUTCOME[o] for o in outcomes],
        "offset": [None] * n,
        "error_code": [s if o != ACCEPTED else None for s, o in zip(statuses, outcomes)],
        "error_name": [http_error_name(s, f, o) for s, f, o in zip(statuses, failures, outcomes)],
        "txn_id": [None] * n,
        "txn_outcome": [None] * n,
        "error_message": [m if o != ACCEPTED else None
                          for m, o in zip(table.column("error_message").to_pylist(), outcomes)],
    }
    return pa.Table.from_pydict(columns, schema=SENDS)


def event_index(table: pa.Table, producer: int = 0, *, per_worker: bool = False) -> dict[str, int]:
    """Pure: event id -> value id of every request of an `HTTP_SENDS` table (the same value ids as
    `sends_from_http` with the same arguments). ValueError naming the id when two requests carried
    the same event id (the run could not tell their records apart)."""
    index: dict[str, int] = {}
    for event_id, value_id in zip(table.column("event_id").to_pylist(), _value_ids(table, producer, per_worker)):
        if event_id in index:
            raise ValueError(f"HTTP_SENDS.event_id: {event_id!r} was sent twice; every event needs an id of its own")
        index[event_id] = value_id
    return index


@dataclass
class DecodeCounts:
    """What an `EventDecoder` saw: records of the run's events, records whose identity could not be
    read (malformed or another producer's format) and records with an id that is not one of the run's
    events (another run's, or made up by the application); the last two decode to -1."""
    matched: int = 0
    unreadable: int = 0
    foreign: int = 0
    examples: dict[str, list[str]] = field(default_factory=lambda: {"unreadable": [], "foreign": []})

    def as_dict(self) -> dict[str, object]:
        """For a manifest or a report."""
        return {"matched": self.matched, "unreadable": self.unreadable, "foreign": self.foreign,
                "examples": {k: list(v) for k, v in self.examples.items()}}


EXAMPLES = 5
EXAMPLE_CHARS = 80


class EventDecoder:
    """A record decoder for the drain (`drain(..., decoder=...)`): value id of the run's event the
    record carries, by identity; -1 for the others, counted in `counts` with a few examples."""

    def __init__(self, identity: IdentityReader, index: Mapping[str, int]) -> None:
        self.identity = identity
        self.index = index
        self.counts = DecodeCounts()

    def _example(self, kind: str, text: str) -> None:
        kept = self.counts.examples[kind]
        if len(kept) < EXAMPLES:
            kept.append(text[:EXAMPLE_CHARS])

    def __call__(self, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None) -> int:
        event_id = self.identity.read(key, value, headers)
        if event_id is None:
            self.counts.unreadable += 1
            self._example("unreadable", repr(bytes(value)[:EXAMPLE_CHARS]) if value is not None else "null value")
            return -1
        value_id = self.index.get(event_id)
        if value_id is None:
            self.counts.foreign += 1
            self._example("foreign", event_id)
            return -1
        self.counts.matched += 1
        return value_id

    def id_value(self, event_id: object) -> int:
        """The value id of an id a processed source listed (a string, or an integer read as its decimal
        form); -1, counted, for anything else or an id that is not one of the run's events."""
        if isinstance(event_id, bool) or not isinstance(event_id, (str, int)) or event_id == "":
            self.counts.unreadable += 1
            self._example("unreadable", repr(event_id))
            return -1
        value_id = self.index.get(str(event_id))
        if value_id is None:
            self.counts.foreign += 1
            self._example("foreign", str(event_id))
            return -1
        self.counts.matched += 1
        return value_id


def value_id_of(identity: IdentityReader, index: Mapping[str, int]) -> EventDecoder:
    """A decoder `(key, value, headers) -> value id` for the run's events recognised by `identity`,
    -1 for foreign or malformed records (see `EventDecoder`)."""
    return EventDecoder(identity, index)


# ------------------------------------------------------------------ checks the application cannot judge

NO_PROCESSED = "the application exposes nothing of what its consumer side processed"
NO_SEND_POSITION = "the application's answer to a request names no partition and offset"
NO_READ_POSITION = "what the consumer side processed comes without the partition and offset of each record"
NO_POLLS = ("poll order needs the offsets of each processed record and the consumer's rebalances; "
            "the application exposes neither")
NO_REBALANCES = ("poll order needs the consumer's rebalances besides the offsets of each processed record; "
                 "the application does not expose them")


def not_applicable(processed: str | None, *, read_offsets: bool = False, consumer_events: bool = False,
                   send_offsets: bool = False, causal_sends: bool = False) -> dict[str, str]:
    """Pure: the anomaly kinds (spec.anomalies.KINDS) an application run cannot judge, each with the
    reason; a report shows them as not applicable, never as passed.

    `processed`: the source of what the consumer side processed (`http`, `topic`, `postgres`) or None;
    `read_offsets`: it gives the input topic's partition and offset of each processed record;
    `consumer_events`: the consumer's rebalances are known; `send_offsets`: the answers name where
    each event was written; `causal_sends`: within each ledger producer, a request was sent only
    after the previous one was answered (`sends_from_http(per_worker=True)`, or a single worker)."""
    out: dict[str, str] = {
        # The application's producer settings are its own: every accepted event counts as acknowledged.
        "lost_unconfirmed": "kafkaproof does not know the application's producer acks; an accepted event "
                            "absent from the log counts as lost",
        "dirty_reads": "the application's events carry no transaction outcome",
        # Ids are matched against the run's events: any other id is a foreign record (counted), not a value.
        "unknown_values": "a record whose id is not one of the run's events is counted as foreign "
                          "(the drain's decode counts), not judged as an unknown value",
    }
    if not send_offsets:
        out["ack_offset_mismatch"] = NO_SEND_POSITION
    if not (send_offsets or read_offsets):
        out["inconsistent_offsets"] = f"{NO_SEND_POSITION}, and {NO_READ_POSITION}"
        out["observed_duplicates"] = (f"{NO_SEND_POSITION}, and {NO_READ_POSITION}: a copy seen elsewhere "
                                      "than the final log cannot be placed")
    if processed is None:
        out["not_delivered"] = NO_PROCESSED
        out["undelivered_attempts"] = NO_PROCESSED
        out["redeliveries"] = NO_PROCESSED
        out["reprocessed"] = NO_PROCESSED
    elif not read_offsets:
        out["redeliveries"] = (f"redeliveries count an offset processed twice; {NO_READ_POSITION} "
                               "(an event processed twice shows as read_count > 1 in values.parquet)")
    if processed is None or not (read_offsets and consumer_events):
        for kind in ("poll_skips", "poll_rewinds", "poll_inversion"):
            out[kind] = NO_REBALANCES if processed is not None and read_offsets else NO_POLLS
    if not causal_sends:
        out["reordering"] = ("requests are sent concurrently, so their seq order is not the order the "
                             "application took them; map each driver worker to a producer of its own")
    return {k: out[k] for k in KINDS if k in out}
