"""Answers the proxy alters on their way to the client: the leaders in Metadata (`metadata` rules) and the record
batches in Fetch (`corrupt`, `duplicate` rules). Pure functions on kio-decoded responses; whether a partition or
batch is affected is the caller's ``decide`` (a rule's filters and its probability/every/count).
"""
from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from . import records as rb
from .errors import KafkaProtocolError

MISSING = "missing"
STALE = "stale"
METADATA_MODES = (MISSING, STALE)
CORRUPT = "corrupt"
DUPLICATE = "duplicate"

#: ``decide(topic name or None, topic id or None, partition)``: whether to alter this partition (Metadata) or
#: this batch (Fetch); called only where the alteration is possible, so a rule counts only what it did.
Decide = Callable[[str | None, uuid.UUID | None, int], bool]


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderChange:
    """One partition whose leader a Metadata answer now misstates."""

    topic: str | None
    partition: int
    old_leader: int
    new_leader: int
    error_code: int

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events."""
        return dataclasses.asdict(self)


def _topic_ident(topic: Any, names: Mapping[uuid.UUID, str]) -> tuple[str | None, uuid.UUID | None]:
    """A topic entry's name (from ``names`` when the answer gives only its id) and id."""
    name = getattr(topic, "name", None)
    if name is None:
        name = getattr(topic, "topic", None)
    topic_id = getattr(topic, "topic_id", None)
    topic_id = topic_id if topic_id is not None and topic_id.int != 0 else None
    if name is None and topic_id is not None:
        name = names.get(topic_id, str(topic_id))  # an id this proxy saw no Metadata answer name: the id
    return name, topic_id


def _other_broker(partition: Any, broker_ids: list[int]) -> int | None:
    """Another replica of the partition than its leader; failing that (one replica), another broker."""
    leader = int(partition.leader_id)
    for node in [int(r) for r in partition.replica_nodes] + broker_ids:
        if node != leader and node >= 0:
            return node
    return None


def misstate_leaders(payload: Any, mode: str, decide: Decide,
                     names: Mapping[uuid.UUID, str] | None = None) -> tuple[Any, list[LeaderChange]]:
    """A Metadata answer whose leaders are wrong for the partitions ``decide`` picks, and what changed.

    ``missing``: leader -1 with LEADER_NOT_AVAILABLE, as while an election runs; clients hold
    their records for that partition and ask again. ``stale``: another replica named leader, error
    NONE, the leader epoch kept: clients send there and get NOT_LEADER_OR_FOLLOWER. The epoch is
    never raised (a client would then distrust the true answer after the heal) and not lowered
    either (librdkafka ignores an answer older than the epoch it knows). Partitions that have no
    leader already are left alone. ``names`` resolves topics an answer names by id only.
    """
    if mode not in METADATA_MODES:
        raise ValueError(f"metadata mode must be one of {', '.join(METADATA_MODES)}; got {mode!r}")
    broker_ids = [int(b.node_id) for b in getattr(payload, "brokers", ())]
    changes: list[LeaderChange] = []
    topics = []
    for topic in payload.topics:
        name, topic_id = _topic_ident(topic, names or {})
        parts, before = [], len(changes)
        for part in topic.partitions:
            leader = int(part.leader_id)
            new_leader = -1 if mode == MISSING else _other_broker(part, broker_ids)
            if leader < 0 or new_leader is None or not decide(name, topic_id, int(part.partition_index)):
                parts.append(part)
                continue
            code = ErrorCode.leader_not_available if mode == MISSING else ErrorCode.none
            parts.append(dataclasses.replace(part, leader_id=i32(new_leader), error_code=code))
            changes.append(LeaderChange(name, int(part.partition_index), leader, new_leader, int(code)))
        topics.append(dataclasses.replace(topic, partitions=tuple(parts)) if len(changes) > before else topic)
    if not changes:
        return payload, changes
    return dataclasses.replace(payload, topics=tuple(topics)), changes


@dataclasses.dataclass(frozen=True, slots=True)
class HiddenHint:
    """One partition of a Produce or Fetch error answer whose leader hint (KIP-951) was taken out."""

    topic: str | None
    partition: int
    leader: int
    error_code: int

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events."""
        return dataclasses.asdict(self)


def hide_leader_hints(payload: Any, decide: Decide,
                      names: Mapping[uuid.UUID, str] | None = None) -> tuple[Any, list[HiddenHint]]:
    """A Produce (v10+) or Fetch (v12+) answer without the current-leader hints of its failed partitions that
    ``decide`` picks (leader and epoch -1, no node endpoints), and which it hid.

    A client refused with NOT_LEADER_OR_FOLLOWER takes the true leader from that hint (librdkafka
    since KIP-951) instead of asking for metadata: a `stale` metadata rule hides it, so the client
    asks, and believes the stale answer again until the heal.
    """
    is_produce = payload.__api_key__ == 0
    hidden: list[HiddenHint] = []
    topics = []
    for topic in payload.responses:
        name, topic_id = _topic_ident(topic, names or {})
        field = "partition_responses" if is_produce else "partitions"
        parts = []
        for part in getattr(topic, field):
            hint = getattr(part, "current_leader", None)
            index = int(part.index if is_produce else part.partition_index)
            if hint is None or int(hint.leader_id) < 0 or int(part.error_code) == 0 or not decide(name, topic_id, index):
                parts.append(part)
                continue
            parts.append(dataclasses.replace(part, current_leader=dataclasses.replace(
                hint, leader_id=i32(-1), leader_epoch=i32(-1))))
            hidden.append(HiddenHint(name, index, int(hint.leader_id), int(part.error_code)))
        topics.append(dataclasses.replace(topic, **{field: tuple(parts)}))
    if not hidden:
        return payload, hidden
    extra = {"node_endpoints": ()} if hasattr(payload, "node_endpoints") else {}
    return dataclasses.replace(payload, responses=tuple(topics), **extra), hidden


@dataclasses.dataclass(frozen=True, slots=True)
class BatchChange:
    """One record batch of a Fetch answer a rule altered: corrupted in place, or repeated at ``copy_offset``."""

    topic: str | None
    partition: int
    base_offset: int
    records: int
    values_corrupted: int = 0
    copy_offset: int | None = None

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events (without the fields that do not apply)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None and (v or k != "values_corrupted")}


def alter_batches(payload: Any, action: str, decide: Decide,
                  names: Mapping[uuid.UUID, str] | None = None) -> tuple[Any, list[BatchChange]]:
    """A Fetch answer with the batches ``decide`` picks corrupted or duplicated, and what changed.

    ``corrupt``: every value of the batch gets its first byte inverted (:func:`records.corrupt_values`);
    compressed batches are left alone (the proxy would have to decompress and compress again).
    ``duplicate``: a copy of the batch is appended to the partition's records at the offsets right
    after the last batch of that partition in the answer (the copy's CRC stays valid), so a client
    delivers its records a second time, at offsets the log gives to other records; a batch cut short
    at the end of the answer is dropped then (the client would fetch it again anyway). Transaction
    markers (control batches) and partitions with an error are left alone.
    """
    if action not in (CORRUPT, DUPLICATE):
        raise ValueError(f"batch action must be {CORRUPT} or {DUPLICATE}; got {action!r}")
    changes: list[BatchChange] = []
    topics = []
    for topic in payload.responses:
        name, topic_id = _topic_ident(topic, names or {})
        parts = []
        for part in topic.partitions:
            data = part.records
            new_data = None
            if data and int(part.error_code) == 0:
                new_data = _alter_records(bytes(data), action, name, topic_id, int(part.partition_index), decide,
                                          changes)
            parts.append(part if new_data is None else dataclasses.replace(part, records=new_data))
        topics.append(dataclasses.replace(topic, partitions=tuple(parts)))
    if not changes:
        return payload, changes
    return dataclasses.replace(payload, responses=tuple(topics)), changes


def _alter_records(data: bytes, action: str, name: str | None, topic_id: uuid.UUID | None, partition: int,
                   decide: Decide, changes: list[BatchChange]) -> bytes | None:
    try:
        batches, complete = rb.split_batches(data)
    except KafkaProtocolError:
        return None  # a legacy message set: left alone
    before = len(changes)
    if action == CORRUPT:
        out = bytearray(data)
        for batch in batches:
            if batch.is_control or batch.compression != "none":
                continue
            try:
                corrupted, values = rb.corrupt_values(data[batch.start:batch.end])
            except KafkaProtocolError:
                continue  # records that do not parse: nothing the rule could aim at
            if not decide(name, topic_id, partition):
                continue
            out[batch.start:batch.end] = corrupted
            changes.append(BatchChange(name, partition, batch.base_offset, batch.last_offset_delta + 1, values))
        return bytes(out) if len(changes) > before else None
    copies = []
    next_offset = max((b.next_offset for b in batches), default=0)
    for batch in batches:
        if batch.is_control or not decide(name, topic_id, partition):
            continue
        copies.append(rb.relocated(data[batch.start:batch.end], next_offset))
        changes.append(BatchChange(name, partition, batch.base_offset, batch.last_offset_delta + 1,
                                   copy_offset=next_offset))
        next_offset += batch.last_offset_delta + 1
    return data[:complete] + b"".join(copies) if copies else None
