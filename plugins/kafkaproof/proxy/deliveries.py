"""The delivery log: what the proxy handed its clients in Fetch answers (docs/proxy.md, "The delivery log").

Off unless turned on over the control channel (`deliveries_start`). Then, per Fetch answer written to a
client, each record the client is handed is kept: topic, partition, offset, its timestamp, key, value and
headers (raw bytes: whoever reads the log recognises the event in them), with the connection, the
client id and when the answer was written. "Handed" is what reached the client's socket, not what its
application processed.

A batch may start before the offset the client asked for (the broker answers whole batches): records
below the fetch offset are not handed over (the client drops them) and are skipped. The fetch offset of a
partition a Fetch request leaves out comes from the connection's fetch session (KIP-227: an incremental
request names only the partitions whose offset changed). Compressed batches are not read (the proxy
does not decompress): each is kept as an unread range of offsets with its codec. The log is bounded
(records and bytes); what it could not keep is counted and reported as truncated.
"""
from __future__ import annotations

import base64
import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any

from . import records as rb
from .errors import KafkaProtocolError, ProxyError

DEFAULT_LIMIT = 200_000
MAX_LIMIT = 5_000_000
DEFAULT_MAX_BYTES = 64 << 20
PAGE_DEFAULT = 5_000
PAGE_MAX = 20_000
_SESSIONLESS_OR_NEW = (-1, 0)  # session epochs of a full fetch request (KIP-227): the session starts anew

#: A partition in a fetch session: (topic id when the request names topics by id, else the name; partition).
PartitionKey = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """One record handed to a client."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    @property
    def size(self) -> int:
        """Bytes it holds (key, value, headers)."""
        return (len(self.key or b"") + len(self.value or b"")
                + sum(len(k) + len(v or b"") for k, v in self.headers))


@dataclasses.dataclass(frozen=True, slots=True)
class Unread:
    """A compressed (or legacy) batch handed to a client without being read: its offsets from the fetch offset on."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    codec: str

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class FetchDeliveries:
    """What one Fetch answer hands its client."""

    records: list[Delivered] = dataclasses.field(default_factory=list)
    unread: list[Unread] = dataclasses.field(default_factory=list)
    below_fetch_offset: int = 0  # records of the answer's batches before the fetch offset (not handed over)


def _key(entry: Any, names: Mapping[uuid.UUID, str]) -> tuple[str, str]:
    """(session key, topic label) of a Fetch request or response topic entry: keyed by id when it has one."""
    name = getattr(entry, "topic", None)
    if isinstance(name, str):
        return name, name
    topic_id = getattr(entry, "topic_id", None)
    if topic_id is None:
        return "", ""
    return str(topic_id), names.get(topic_id, str(topic_id))


def is_consumer_fetch(request: Any) -> bool:
    """Whether a decoded Fetch request is a consumer's (replica id -1), not a follower's."""
    state = getattr(request, "replica_state", None)
    replica = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    return int(replica) < 0


class FetchSession:
    """The fetch offsets of one connection's partitions, as the broker knows them (KIP-227).

    A full fetch (session epoch -1 or 0) names every partition it wants and starts anew; an incremental
    one (epoch > 0) names only the partitions whose fetch offset changed, and `forgotten_topics_data`
    the ones it drops, the rest keep their offset.
    """

    def __init__(self) -> None:
        self.offsets: dict[PartitionKey, int] = {}

    def update(self, request: Any, names: Mapping[uuid.UUID, str]) -> dict[PartitionKey, int]:
        """Apply a decoded Fetch request; returns the fetch offset of every partition its answer may hold."""
        if int(getattr(request, "session_epoch", -1)) in _SESSIONLESS_OR_NEW:
            self.offsets = {}
        for topic in getattr(request, "forgotten_topics_data", ()):
            key, _ = _key(topic, names)
            for partition in topic.partitions:
                self.offsets.pop((key, int(partition)), None)
        for topic in request.topics:
            key, _ = _key(topic, names)
            for part in topic.partitions:
                self.offsets[(key, int(part.partition))] = int(part.fetch_offset)
        return dict(self.offsets)


def fetch_deliveries(payload: Any, positions: Mapping[PartitionKey, int], names: Mapping[uuid.UUID, str],
                     topics: frozenset[str] | None = None) -> FetchDeliveries:
    """Pure: the records a decoded Fetch answer hands its client, given the fetch offsets its request (and
    fetch session) asked for. Partitions with an error, transaction markers and records before the fetch
    offset are not handed over; compressed batches are kept unread. ``topics``: only these (None: all)."""
    out = FetchDeliveries()
    for topic in payload.responses:
        key, label = _key(topic, names)
        if topics is not None and label not in topics:
            continue
        for part in topic.partitions:
            if int(part.error_code) != 0 or not part.records:
                continue
            index = int(part.partition_index)
            start = positions.get((key, index), 0)
            _partition_deliveries(bytes(part.records), label, index, start, out)
    return out


def _partition_deliveries(data: bytes, topic: str, partition: int, start: int, out: FetchDeliveries) -> None:
    try:
        batches, _complete = rb.split_batches(data)
    except KafkaProtocolError:  # a legacy message set (magic 0/1): not read
        out.unread.append(Unread(topic, partition, start, -1, "legacy"))
        return
    for batch in batches:
        if batch.is_control:
            continue
        if batch.next_offset <= start:
            out.below_fetch_offset += batch.last_offset_delta + 1
            continue
        if batch.compression != "none":
            out.unread.append(Unread(topic, partition, max(batch.base_offset, start), batch.next_offset - 1,
                                     batch.compression))
            continue
        raw = data[batch.start:batch.end]
        try:
            found = rb.records_of(raw)
        except KafkaProtocolError:
            out.unread.append(Unread(topic, partition, max(batch.base_offset, start), batch.next_offset - 1,
                                     "malformed"))
            continue
        base_ts = rb.base_timestamp(raw)
        for record in found:
            offset = batch.base_offset + record.offset_delta
            if offset < start:
                out.below_fetch_offset += 1
                continue
            out.records.append(Delivered(
                topic, partition, offset, base_ts + record.timestamp_delta,
                raw[record.key[0]:record.key[1]] if record.key else None,
                raw[record.value[0]:record.value[1]] if record.value else None,
                rb.headers_of(raw, record)))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    """Inverse of the log's byte encoding (base64; None stays None)."""
    return None if text is None else base64.b64decode(text)


def _positive_int(value: Any, field: str, default: int, maximum: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ProxyError(f"delivery log field {field!r}: an integer 1..{maximum:,}; got {value!r}")
    return value


class DeliveryLog:
    """The records handed to clients in Fetch answers while it is on, bounded by `limit` records and
    `max_bytes` bytes of keys, values and headers; `topics`: only these (None: every topic)."""

    def __init__(self, limit: Any = None, max_bytes: Any = None, topics: Any = None) -> None:
        self.limit = _positive_int(limit, "limit", DEFAULT_LIMIT, MAX_LIMIT)
        self.max_bytes = _positive_int(max_bytes, "max_bytes", DEFAULT_MAX_BYTES, 1 << 34)
        if topics is not None and (not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics)):
            raise ProxyError(f"delivery log field 'topics': a list of topic names or null; got {topics!r}")
        self.topics = frozenset(topics) if topics is not None else None
        self.on = True
        self.started_ms = int(time.time() * 1000)
        self.entries: list[tuple] = []  # (at_ms, conn, client_id, broker, Delivered)
        self.unread: list[dict[str, Any]] = []
        self.bytes = 0
        self.handed = 0        # every record handed over while on, kept or not
        self.dropped = 0       # handed over but not kept (the bounds)
        self.unread_dropped = 0
        self.below_fetch_offset = 0
        self.answers = 0       # Fetch answers that handed over at least one record or unread batch
        self.undecodable = 0   # Fetch requests or answers the proxy could not decode: not logged

    def add(self, conn: int, client_id: str | None, broker: int | None, found: FetchDeliveries,
            at_ms: int | None = None) -> None:
        """Keep what one Fetch answer handed a client (nothing once stopped)."""
        if not self.on:
            return
        at_ms = int(time.time() * 1000) if at_ms is None else at_ms
        self.below_fetch_offset += found.below_fetch_offset
        if found.records or found.unread:
            self.answers += 1
        for record in found.records:
            self.handed += 1
            if len(self.entries) >= self.limit or self.bytes + record.size > self.max_bytes:
                self.dropped += 1
                continue
            self.bytes += record.size
            self.entries.append((at_ms, conn, client_id, broker, record))
        for unread in found.unread:
            if len(self.unread) >= self.limit:
                self.unread_dropped += 1
                continue
            self.unread.append({**unread.as_json(), "at_ms": at_ms, "conn": conn, "client_id": client_id,
                                "broker": broker})

    def stop(self) -> bool:
        """Stop recording (the log stays readable); whether it was on."""
        was, self.on = self.on, False
        return was

    def summary(self) -> dict[str, Any]:
        """Its settings and counters; ``truncated`` when the bounds dropped records or unread batches."""
        return {"on": self.on, "limit": self.limit, "max_bytes": self.max_bytes,
                "topics": sorted(self.topics) if self.topics is not None else None, "started_ms": self.started_ms,
                "kept": len(self.entries), "handed": self.handed, "dropped": self.dropped,
                "truncated": bool(self.dropped or self.unread_dropped), "bytes": self.bytes,
                "unread_batches": len(self.unread) + self.unread_dropped, "unread_dropped": self.unread_dropped,
                "below_fetch_offset": self.below_fetch_offset, "answers": self.answers,
                "undecodable": self.undecodable}

    def page(self, start: Any = 0, size: Any = None) -> dict[str, Any]:
        """Records ``start`` .. ``start + size`` (JSON-ready, bytes in base64), the summary, and on the first
        page the unread batches; ``next`` is where the next page starts (None: this is the last)."""
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ProxyError(f"deliveries field 'start': an integer >= 0; got {start!r}")
        size = _positive_int(size, "max", PAGE_DEFAULT, PAGE_MAX)
        chunk = self.entries[start:start + size]
        end = start + len(chunk)
        return {**self.summary(), "start": start, "next": end if end < len(self.entries) else None,
                "records": [_entry_json(e) for e in chunk], "unread": self.unread if start == 0 else []}


def _entry_json(entry: tuple) -> dict[str, Any]:
    at_ms, conn, client_id, broker, r = entry
    return {"at_ms": at_ms, "conn": conn, "client_id": client_id, "broker": broker, "topic": r.topic,
            "partition": r.partition, "offset": r.offset, "timestamp_ms": r.timestamp_ms, "key": _b64(r.key),
            "value": _b64(r.value), "headers": [[k, _b64(v)] for k, v in r.headers]}


def read_all(call: Any, page: int = PAGE_DEFAULT) -> dict[str, Any]:
    """Every page of a proxy's log through ``call(op, **fields)`` (a control client's `call`): its summary
    with all ``records`` and ``unread``."""
    out: dict[str, Any] | None = None
    start: int | None = 0
    while start is not None:
        reply = call("deliveries", start=start, max=page)["deliveries"]
        if out is None:
            out = dict(reply)
        else:
            out["records"].extend(reply["records"])
        start = reply["next"]
    assert out is not None
    out.pop("start", None)
    out.pop("next", None)
    return out
