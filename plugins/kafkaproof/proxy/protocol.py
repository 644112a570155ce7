"""Kafka wire protocol helpers for the fault proxy.

Two levels:

* a cheap *peek* level (pure ``struct`` work on a frame) that the no-fault path
  uses: request header fields, the acks of a Produce request, the correlation id
  of a response;
* a *kio* level that decodes and encodes whole payloads, used only where the
  proxy must understand or build a body: ApiVersions capping, address rewriting
  in Metadata/FindCoordinator/DescribeCluster responses, the targets of a faulted
  Produce/Fetch request, and synthetic error responses.

A *frame* here is the bytes after the 4-byte length prefix: header + body.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import sys
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.index import (
    UnknownAPIKey,
    UnknownEntity,
    load_request_schema,
    load_response_schema,
)
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from .errors import KafkaProtocolError, UnsupportedVersion

LENGTH = struct.Struct(">i")
_REQ_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I16 = struct.Struct(">h")

#: Largest frame the proxy accepts (the broker default socket.request.max.bytes is 100 MiB).
MAX_FRAME_BYTES = 256 * 1024 * 1024

PRODUCE = 0
FETCH = 1
METADATA = 3
OFFSET_COMMIT = 8
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_CLUSTER = 60
SHARE_GROUP_HEARTBEAT = 76
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
#: Share-group APIs (KIP-932) whose requests name partitions, by topic id; their error answers: share_answers.py.
SHARE_PARTITION_APIS = frozenset({SHARE_FETCH, SHARE_ACKNOWLEDGE})

#: Per-partition answers the proxy can build from the request's topics (api -> response's topics
#: field, its partitions field, the partition's error field); AddPartitionsToTxn only up to v3
#: (v4+, broker to broker, has a top-level error).
PARTITION_ANSWERS: Mapping[int, tuple[str, str, str]] = {
    OFFSET_COMMIT: ("topics", "partitions", "error_code"),
    TXN_OFFSET_COMMIT: ("topics", "partitions", "error_code"),
    ADD_PARTITIONS_TO_TXN: ("results_by_topic_v3_and_below", "results_by_partition", "partition_error_code"),
}
#: APIs an `error` rule can answer: Produce and Fetch, the per-partition ones above, and those whose
#: answer has one top-level error (the group protocol, coordinator lookup, the transaction calls).
ERROR_APIS = frozenset({PRODUCE, FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
                        INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN, SHARE_GROUP_HEARTBEAT, *PARTITION_ANSWERS,
                        *SHARE_PARTITION_APIS})

#: APIs whose requests name topic/partitions the proxy decodes (`request_targets`).
TARGETED_APIS = frozenset({PRODUCE, FETCH, *PARTITION_ANSWERS, *SHARE_PARTITION_APIS})
#: APIs a rule's `topic`/`partitions` filter may select requests of.
FILTERABLE_APIS = frozenset({PRODUCE, FETCH, *SHARE_PARTITION_APIS})
#: APIs whose request the proxy decodes to build an error answer (the keys asked for, the acknowledgements).
REQUEST_ANSWERED_APIS = frozenset({FIND_COORDINATOR, *SHARE_PARTITION_APIS})

#: APIs whose responses carry broker host/port pairs the proxy may rewrite.
ADDRESS_APIS = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})

#: api key -> snake_case name, as kio (and the Kafka JSON schemas) spell them.
API_NAMES: Mapping[int, str] = api_key_map


def api_name(api_key: int) -> str:
    """Snake-case name of an API key (``produce``), or ``api_<key>`` if unknown."""
    return API_NAMES.get(api_key) or f"api_{api_key}"


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


_KEY_BY_SQUASHED = {_squash(name): key for key, name in API_NAMES.items()}


def api_key_of(value: int | str) -> int:
    """API key from an int, a digit string or a name in any case style.

    ``0``, ``"0"``, ``"produce"``, ``"Produce"`` and ``"PRODUCE"`` all give 0;
    ``"find_coordinator"`` and ``"FindCoordinator"`` give 10.
    """
    if isinstance(value, bool):
        raise ValueError(f"not an API key: {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return _KEY_BY_SQUASHED[_squash(text)]
    except KeyError:
        raise ValueError(f"unknown Kafka API name {value!r}") from None


def error_code_of(value: int | str) -> ErrorCode:
    """Kafka error code from an int or a name (``NOT_ENOUGH_REPLICAS``, ``not_enough_replicas``)."""
    if isinstance(value, bool):
        raise ValueError(f"not an error code: {value!r}")
    if isinstance(value, int) or str(value).lstrip("-").isdigit():
        try:
            return ErrorCode(int(value))
        except ValueError:
            raise ValueError(f"unknown Kafka error code {value!r}") from None
    try:
        return ErrorCode[str(value).strip().lower()]
    except KeyError:
        raise ValueError(f"unknown Kafka error name {value!r}") from None


# --------------------------------------------------------------------------- peek level


@dataclasses.dataclass(slots=True)
class RequestHeader:
    """The fields of a request header the proxy tracks; ``fixed_end`` is where tagged fields (v2) start."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    fixed_end: int


def parse_request_header(frame: bytes) -> RequestHeader:
    """Peek api key, version, correlation id and client id of a request frame.

    Works for request header v1 and v2 alike: ``client_id`` is a legacy nullable
    string in both (Kafka special-cases it), and the v2 tagged fields come after it.
    """
    if len(frame) < _REQ_FIXED.size:
        raise KafkaProtocolError(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, version, corr, cid_len = _REQ_FIXED.unpack_from(frame, 0)
    pos = _REQ_FIXED.size
    client_id: str | None = None
    if cid_len >= 0:
        end = pos + cid_len
        if end > len(frame):
            raise KafkaProtocolError("request header client_id runs past the frame")
        client_id = frame[pos:end].decode("utf-8", "replace")
        pos = end
    return RequestHeader(api_key, version, corr, client_id, pos)


def response_correlation_id(frame: bytes) -> int:
    """Correlation id of a response frame (the first 4 bytes of every response header)."""
    if len(frame) < 4:
        raise KafkaProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    return int.from_bytes(frame[:4], "big", signed=True)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, position after it)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise KafkaProtocolError("varint runs past the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise KafkaProtocolError("varint is too long")


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    """Position just after a tagged-field section starting at ``pos``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise KafkaProtocolError("tagged fields run past the frame")
    return pos


# Produce became flexible at v9 in every Kafka release; used when kio lacks the version.
_PRODUCE_FIRST_FLEXIBLE = 9


@functools.cache
def request_is_flexible(api_key: int, version: int) -> bool:
    """Whether a request version is "flexible" (request header v2, compact types, tagged fields)."""
    try:
        return bool(load_request_schema(api_key, version).__flexible__)
    except (UnknownAPIKey, UnknownEntity):
        if api_key == PRODUCE:
            return version >= _PRODUCE_FIRST_FLEXIBLE
        raise UnsupportedVersion(f"kio has no schema for {api_name(api_key)} v{version}") from None


@functools.cache
def response_header_is_flexible(api_key: int, version: int) -> bool:
    """Whether the response uses header v1 (tagged fields); ApiVersions never does."""
    if api_key == API_VERSIONS:
        return False
    try:
        return bool(load_response_schema(api_key, version).__flexible__)
    except (UnknownAPIKey, UnknownEntity):
        if api_key == PRODUCE:
            return version >= _PRODUCE_FIRST_FLEXIBLE
        raise UnsupportedVersion(f"kio has no schema for {api_name(api_key)} v{version}") from None


def request_body_offset(frame: bytes, header: RequestHeader) -> int:
    """Offset of the request body in ``frame``."""
    if request_is_flexible(header.api_key, header.api_version):
        return skip_tagged_fields(frame, header.fixed_end)
    return header.fixed_end


def response_body_offset(frame: bytes, api_key: int, version: int) -> int:
    """Offset of the response body in ``frame``."""
    if response_header_is_flexible(api_key, version):
        return skip_tagged_fields(frame, 4)
    return 4


def produce_acks(frame: bytes, header: RequestHeader) -> int:
    """The ``acks`` field of a Produce request, read without decoding the records.

    The body starts with the nullable transactional id (a legacy string before v9,
    a compact string from v9), then acks as int16.
    """
    pos = request_body_offset(frame, header)
    if request_is_flexible(PRODUCE, header.api_version):
        length_plus_one, pos = read_uvarint(frame, pos)
        pos += max(length_plus_one - 1, 0)
    elif header.api_version >= 3:
        (length,) = _I16.unpack_from(frame, pos)
        pos += 2 + max(length, 0)
    if pos + 2 > len(frame):
        raise KafkaProtocolError("Produce request is too short to hold acks")
    return _I16.unpack_from(frame, pos)[0]


_I32 = struct.Struct(">i")
_BATCH_MAGIC_AT = 16        # record batch v2: baseOffset int64, batchLength int32, leaderEpoch int32, magic int8
_BATCH_LAST_DELTA_AT = 23   # ... crc int32, attributes int16, lastOffsetDelta int32
_BATCH_LENGTH_OVERHEAD = 12  # baseOffset + batchLength precede the batchLength bytes


def record_batch_offsets(frame: bytes, start: int, size: int) -> int:
    """How many offsets the record batches in ``frame[start:start+size]`` take once written.

    Sums ``lastOffsetDelta + 1`` over the v2 batches; -1 for legacy message sets
    (magic < 2) or a truncated batch, which the proxy forwards untouched anyway.
    """
    end, pos, total = start + size, start, 0
    while pos + _BATCH_LAST_DELTA_AT + 4 <= end:
        (length,) = _I32.unpack_from(frame, pos + 8)
        if frame[pos + _BATCH_MAGIC_AT] != 2 or length <= 0:
            return -1
        (last_delta,) = _I32.unpack_from(frame, pos + _BATCH_LAST_DELTA_AT)
        total += last_delta + 1
        pos += _BATCH_LENGTH_OVERHEAD + length
    return total if pos == end else -1


def _read_string(frame: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        length_plus_one, pos = read_uvarint(frame, pos)
        length = length_plus_one - 1
    else:
        (length,) = _I16.unpack_from(frame, pos)
        pos += 2
    if length < 0:
        return None, pos
    return frame[pos:pos + length].decode("utf-8", "replace"), pos + length


def _read_array_length(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        length_plus_one, pos = read_uvarint(frame, pos)
        return max(length_plus_one - 1, 0), pos
    (length,) = _I32.unpack_from(frame, pos)
    return max(length, 0), pos + 4


def produce_targets(frame: bytes, header: RequestHeader,
                    topic_names: Mapping[uuid.UUID, str] | None = None) -> tuple[TopicPartitions, ...]:
    """Topics and partitions of a Produce request, skipping the records instead of copying them.

    Layout (v3+): transactional_id, acks int16, timeout int32, then topics
    [name (v3-v12) or topic id (v13+), partitions [index int32, records bytes]],
    with compact encodings and per-element tagged fields from v9.
    """
    flexible = request_is_flexible(PRODUCE, header.api_version)
    try:
        pos = request_body_offset(frame, header)
        if header.api_version >= 3:
            _txn, pos = _read_string(frame, pos, flexible)
        pos += 6  # acks, timeout
        n_topics, pos = _read_array_length(frame, pos, flexible)
        out = []
        for _ in range(n_topics):
            topic_id: uuid.UUID | None = None
            if header.api_version >= 13:
                topic_id = uuid.UUID(bytes=bytes(frame[pos:pos + 16]))
                pos += 16
                name = (topic_names or {}).get(topic_id, str(topic_id))
            else:
                name, pos = _read_string(frame, pos, flexible)
            n_parts, pos = _read_array_length(frame, pos, flexible)
            partitions, counts = [], []
            for _ in range(n_parts):
                (index,) = _I32.unpack_from(frame, pos)
                partitions.append(index)
                if flexible:
                    size_plus_one, pos = read_uvarint(frame, pos + 4)
                    size = size_plus_one - 1
                else:
                    (size,) = _I32.unpack_from(frame, pos + 4)
                    pos += 8
                size = max(size, 0)
                counts.append(record_batch_offsets(frame, pos, size) if pos + size <= len(frame) else -1)
                pos += size
                if flexible:
                    pos = skip_tagged_fields(frame, pos)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
            out.append(TopicPartitions(name or "", tuple(partitions), topic_id, tuple(counts)))
    except struct.error as exc:
        raise KafkaProtocolError(f"Produce v{header.api_version} request is truncated: {exc}") from exc
    if pos > len(frame):
        raise KafkaProtocolError(f"Produce v{header.api_version} request is truncated")
    return tuple(out)


def with_length(payload: bytes) -> bytes:
    """Prefix a frame with its 4-byte big-endian length."""
    return LENGTH.pack(len(payload)) + payload


# --------------------------------------------------------------------------- kio level


def request_type(api_key: int, version: int) -> type:
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedVersion(f"kio has no request schema for {api_name(api_key)} v{version}") from None


def response_type(api_key: int, version: int) -> type:
    try:
        return load_response_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedVersion(f"kio has no response schema for {api_name(api_key)} v{version}") from None


def max_supported_version(api_key: int) -> int:
    """Highest version of an API that kio can decode and encode (-1 if none)."""
    name = API_NAMES.get(api_key)
    if name is None:
        return -1
    from kio.schema.index import schema_name_map

    versions = schema_name_map.get(name, {})
    return max(versions) if versions else -1


def decode_request(frame: bytes, header: RequestHeader | None = None) -> Any:
    """Decode a request body with kio (header peeked from ``frame`` when not given)."""
    header = header or parse_request_header(frame)
    cls = request_type(header.api_key, header.api_version)
    try:
        payload, _ = entity_reader(cls)(frame, request_body_offset(frame, header))
    except (ValueError, IndexError, TypeError) as exc:
        raise KafkaProtocolError(f"cannot decode {api_name(header.api_key)} v{header.api_version} request: {exc}") from exc
    return payload


def decode_response(frame: bytes, api_key: int, version: int) -> Any:
    """Decode a response body with kio, given the api key and version of its request."""
    cls = response_type(api_key, version)
    try:
        payload, _ = entity_reader(cls)(frame, response_body_offset(frame, api_key, version))
    except (ValueError, IndexError, TypeError) as exc:
        raise KafkaProtocolError(f"cannot decode {api_name(api_key)} v{version} response: {exc}") from exc
    return payload


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_response(payload: Any, correlation_id: int) -> bytes:
    """Length-prefixed response frame: the right header version for the payload, then the body."""
    header_type = payload.__header_schema__
    if payload.__api_key__ == API_VERSIONS:
        from kio.schema.response_header.v0.header import ResponseHeader as header_type  # noqa: N813
    header = header_type(correlation_id=i32(correlation_id))
    return with_length(_encode(header) + _encode(payload))


def encode_request(payload: Any, correlation_id: int, client_id: str | None = "kafkaproof") -> bytes:
    """Length-prefixed request frame (used by tests and the fake broker's clients)."""
    header_type = payload.__header_schema__
    header = header_type(
        request_api_key=i16(payload.__api_key__),
        request_api_version=i16(payload.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return with_length(_encode(header) + _encode(payload))


# --------------------------------------------------------------------------- semantics


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPartitions:
    """The partitions of one topic a request names; ``topic_id`` set when the request used ids.

    ``record_counts`` (Produce only, aligned with ``partitions``): how many offsets
    each partition's records take once written, -1 where the records are not v2
    batches. With the base offset of the response it names the exact offsets a
    write occupies.
    """

    topic: str
    partitions: tuple[int, ...]
    topic_id: uuid.UUID | None = None
    record_counts: tuple[int, ...] = dataclasses.field(default=(), compare=False)

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events."""
        out: dict[str, Any] = {"topic": self.topic, "partitions": list(self.partitions)}
        if self.topic_id is not None:
            out["topic_id"] = str(self.topic_id)
        if self.record_counts:
            out["record_counts"] = list(self.record_counts)
        return out


def _topic_label(entry: Any, topic_names: Mapping[uuid.UUID, str]) -> tuple[str, uuid.UUID | None]:
    for name_field in ("name", "topic"):
        name = getattr(entry, name_field, None)
        if isinstance(name, str):
            return name, None
    topic_id = getattr(entry, "topic_id", None)
    if topic_id is None:
        return "", None
    return topic_names.get(topic_id, str(topic_id)), topic_id


def request_targets(payload: Any, topic_names: Mapping[uuid.UUID, str]) -> tuple[TopicPartitions, ...]:
    """Topic/partitions named by a decoded Produce, Fetch, (Txn)OffsetCommit, AddPartitionsToTxn, ShareFetch or
    ShareAcknowledge request (empty for other APIs).

    Requests that name topics by id (Produce v13+, Fetch v13+) are resolved
    through ``topic_names`` (learned from Metadata responses); unknown ids keep the
    id as the name.
    """
    api_key = payload.__api_key__
    if api_key == PRODUCE:
        pairs = ((t, tuple(int(p.index) for p in t.partition_data)) for t in payload.topic_data)
    elif api_key == FETCH:
        pairs = ((t, tuple(int(p.partition) for p in t.partitions)) for t in payload.topics)
    elif api_key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
        pairs = ((t, tuple(int(p.partition_index) for p in t.partitions)) for t in payload.topics)
    elif api_key == ADD_PARTITIONS_TO_TXN:
        pairs = ((t, tuple(int(p) for p in t.partitions)) for t in getattr(payload, "v3_and_below_topics", ()))
    elif api_key in SHARE_PARTITION_APIS:
        pairs = ((t, tuple(int(p.partition_index) for p in t.partitions)) for t in payload.topics)
    else:
        return ()
    out = []
    for topic, partitions in pairs:
        name, topic_id = _topic_label(topic, topic_names)
        out.append(TopicPartitions(name, partitions, topic_id))
    return tuple(out)


def produce_results(payload: Any, topic_names: Mapping[uuid.UUID, str]) -> list[dict[str, Any]]:
    """Per-partition outcome of a decoded Produce response (error code and base offset)."""
    results = []
    for topic in payload.responses:
        name, topic_id = _topic_label(topic, topic_names)
        for part in topic.partition_responses:
            code = int(part.error_code)
            results.append({
                "topic": name,
                "partition": int(part.index),
                "error_code": code,
                "error": _error_name(code),
                "base_offset": int(part.base_offset),
                **({"topic_id": str(topic_id)} if topic_id else {}),
            })
    return results


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


def make_entity(cls: type, **values: Any) -> Any:
    """Instantiate a kio entity with the subset of ``values`` its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in values.items() if k in names})
    except TypeError as exc:
        raise UnsupportedVersion(f"cannot build {cls.__module__}.{cls.__name__}: {exc}") from exc


def _topic_fields(target: TopicPartitions, response_cls: type) -> dict[str, Any]:
    """The topic-identifying field of ``target`` under the name ``response_cls`` uses."""
    wanted = {f.name for f in dataclasses.fields(response_cls)}
    if "topic_id" in wanted:
        if target.topic_id is None:
            raise UnsupportedVersion(f"{response_cls.__name__} needs a topic id, the request named {target.topic!r}")
        return {"topic_id": target.topic_id}
    for field_name in ("name", "topic"):
        if field_name in wanted:
            return {field_name: target.topic}
    raise UnsupportedVersion(f"{response_cls.__name__} has no topic field the proxy knows")


ZERO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
INJECTED_MESSAGE = "injected by kafkaproof fault proxy"


def build_error_response(api_key: int, version: int, targets: Iterable[TopicPartitions],
                         error: int | ErrorCode, request: Any = None) -> Any:
    """A response of ``version`` that answers a request with ``error`` (any API of :data:`ERROR_APIS`).

    Produce, Fetch, (Txn)OffsetCommit and AddPartitionsToTxn (v0-3) carry the error on every
    partition of ``targets``, the topic/partitions of the request being answered (see
    :func:`produce_targets`, :func:`request_targets`); offsets and watermarks are -1 and fetches
    carry empty record sets. FindCoordinator v4+ answers each key of ``request`` (the decoded
    request) with the error. Every other API of the set has one top-level error code; the rest of
    such an answer is empty (ids, epochs, ports -1; strings, arrays and bytes empty).
    """
    code = error if isinstance(error, ErrorCode) else error_code_of(error)
    if api_key not in ERROR_APIS:
        raise UnsupportedVersion(f"error injection supports {', '.join(sorted(api_name(k) for k in ERROR_APIS))}; "
                                 f"not {api_name(api_key)}")
    if api_key in SHARE_PARTITION_APIS:
        from .share_answers import build_share_error
        return build_share_error(api_key, version, targets, code, request)
    response_cls = response_type(api_key, version)
    mod = sys.modules[response_cls.__module__]
    if api_key == PRODUCE:
        topic_cls, part_cls = mod.TopicProduceResponse, mod.PartitionProduceResponse
        topics = tuple(
            make_entity(topic_cls, **_topic_fields(t, topic_cls), partition_responses=tuple(
                make_entity(part_cls, index=i32(p), error_code=code, base_offset=i64(-1),
                      log_start_offset=i64(-1), record_errors=(), error_message=INJECTED_MESSAGE)
                for p in t.partitions))
            for t in targets)
        return make_entity(response_cls, responses=topics, throttle_time=ZERO_THROTTLE)
    if api_key == FETCH:
        topic_cls, part_cls = mod.FetchableTopicResponse, mod.PartitionData
        topics = tuple(
            make_entity(topic_cls, **_topic_fields(t, topic_cls), partitions=tuple(
                make_entity(part_cls, partition_index=i32(p), error_code=code, high_watermark=i64(-1),
                      last_stable_offset=i64(-1), log_start_offset=i64(-1), aborted_transactions=(),
                      records=b"")
                for p in t.partitions))
            for t in targets)
        # Session id 0: for a sessionless fetch that is what the broker sends; for a
        # session fetch it tells the client the session is gone, and every client
        # then sends a full fetch, which is the safe outcome.
        return make_entity(response_cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none,
                     session_id=i32(0), responses=topics)
    response_fields = {f.name: f for f in dataclasses.fields(response_cls)}
    shape = PARTITION_ANSWERS.get(api_key)
    if shape and shape[0] in response_fields:
        topics_field, partitions_field, error_field = shape
        topic_cls = _element_type(response_fields[topics_field])
        part_cls = _element_type({f.name: f for f in dataclasses.fields(topic_cls)}[partitions_field])
        topics = tuple(
            _empty_entity(topic_cls, code, **_topic_fields(t, topic_cls), **{partitions_field: tuple(
                _empty_entity(part_cls, code, partition_index=i32(p), **{error_field: code}) for p in t.partitions)})
            for t in targets)
        return _empty_entity(response_cls, code, **{topics_field: topics})
    if "coordinators" in response_fields:  # FindCoordinator v4+: an answer per key asked for
        keys = tuple(getattr(request, "coordinator_keys", ()) or ())
        coordinator_cls = _element_type(response_fields["coordinators"])
        return _empty_entity(response_cls, code, coordinators=tuple(
            _empty_entity(coordinator_cls, code, key=k) for k in keys))
    if "error_code" not in response_fields:
        raise UnsupportedVersion(f"{api_name(api_key)} v{version} has no error the proxy knows how to set")
    return _empty_entity(response_cls, code)


# Fields an empty answer sets to -1 rather than 0 (an id, epoch or port of nothing).
_MINUS_ONE_FIELDS = frozenset({"node_id", "port", "producer_id", "producer_epoch", "generation_id"})


def _element_type(f: dataclasses.Field) -> type:
    """The entity type of an array field (``tuple[X, ...]``)."""
    return typing.get_args(f.type)[0]


def _empty_value(f: dataclasses.Field, code: ErrorCode) -> Any:
    kafka_type = f.metadata.get("kafka_type")
    if typing.get_origin(f.type) is tuple or kafka_type is None:
        return ()
    if kafka_type == "error_code":
        return code
    if f.name == "error_message":
        return INJECTED_MESSAGE
    if type(None) in typing.get_args(f.type):
        return None
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type.startswith("timedelta"):
        return f.type.parse(datetime.timedelta(0))
    if kafka_type.startswith(("int", "uint", "float")):
        return f.type(-1 if f.name in _MINUS_ONE_FIELDS else 0)
    raise UnsupportedVersion(f"cannot make an empty {kafka_type} for field {f.name}")


def _empty_entity(cls: type, code: ErrorCode, **values: Any) -> Any:
    """An instance of ``cls`` carrying ``code`` in its error fields, ``values`` where given, every
    other field without a default empty (see :func:`_empty_value`)."""
    for f in dataclasses.fields(cls):
        carries_error = f.metadata.get("kafka_type") == "error_code" or f.name == "error_message"
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name not in values and (carries_error or required):
            values[f.name] = _empty_value(f, code)
    return make_entity(cls, **values)


def encode_error_response(api_key: int, version: int, targets: Iterable[TopicPartitions],
                          error: int | ErrorCode, correlation_id: int, request: Any = None) -> bytes:
    """Length-prefixed frame of :func:`build_error_response`."""
    return encode_response(build_error_response(api_key, version, targets, error, request), correlation_id)


#: ``mapper(node_id, host, port)`` returns the (host, port) to advertise instead, or None to keep.
AddressMapper = Callable[[int, str, int], "tuple[str, int] | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class AddressChange:
    """One broker address rewritten in a response."""

    node_id: int
    old: tuple[str, int]
    new: tuple[str, int]

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events."""
        return {"node_id": self.node_id, "old": f"{self.old[0]}:{self.old[1]}", "new": f"{self.new[0]}:{self.new[1]}"}


def rewrite_addresses(payload: Any, mapper: AddressMapper) -> tuple[Any, list[AddressChange]]:
    """Walk a decoded response and rewrite every (node id, host, port) entity through ``mapper``.

    Covers Metadata brokers, FindCoordinator (top level before v4, coordinators
    from v4), DescribeCluster brokers and the KIP-951 node endpoints of
    Produce/Fetch, whatever the version, because it looks for the fields rather
    than the type. Returns the (possibly new) payload and the changes made.
    """
    changes: list[AddressChange] = []
    return _rewrite(payload, mapper, changes), changes


def _rewrite(value: Any, mapper: AddressMapper, changes: list[AddressChange]) -> Any:
    if isinstance(value, tuple):
        if not value or not dataclasses.is_dataclass(value[0]):
            return value
        new_items = tuple(_rewrite(item, mapper, changes) for item in value)
        return value if all(a is b for a, b in zip(new_items, value)) else new_items
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    updates: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        child = getattr(value, f.name)
        if isinstance(child, tuple) or dataclasses.is_dataclass(child):
            new_child = _rewrite(child, mapper, changes)
            if new_child is not child:
                updates[f.name] = new_child
    node_id = getattr(value, "node_id", getattr(value, "broker_id", None))
    host, port = getattr(value, "host", None), getattr(value, "port", None)
    if node_id is not None and isinstance(host, str) and isinstance(port, int) and host:
        target = mapper(int(node_id), host, int(port))
        if target is not None and (target[0], target[1]) != (host, int(port)):
            updates["host"], updates["port"] = target[0], i32(target[1])
            changes.append(AddressChange(int(node_id), (host, int(port)), (target[0], int(target[1]))))
    return dataclasses.replace(value, **updates) if updates else value


def metadata_topic_ids(payload: Any) -> dict[uuid.UUID, str]:
    """topic id -> name from a decoded Metadata response (empty before v10)."""
    out: dict[uuid.UUID, str] = {}
    for topic in getattr(payload, "topics", ()):
        topic_id = getattr(topic, "topic_id", None)
        if topic_id is not None and topic.name and topic_id.int != 0:
            out[topic_id] = topic.name
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class VersionCap:
    """One ApiVersions entry lowered by the proxy."""

    api_key: int
    old_max: int
    new_max: int

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form used in events."""
        return {"api": api_name(self.api_key), "api_key": self.api_key, "old_max": self.old_max, "new_max": self.new_max}


def cap_api_versions(payload: Any, caps: Mapping[int, int]) -> tuple[Any, list[VersionCap]]:
    """Lower the max version of the APIs in ``caps`` in a decoded ApiVersions response.

    An entry whose min version is above the cap is left alone (capping it would
    advertise an empty range); the caller logs that the API stays undecodable.
    """
    changes: list[VersionCap] = []
    entries = []
    for entry in payload.api_keys:
        cap = caps.get(int(entry.api_key))
        if cap is not None and entry.max_version > cap >= entry.min_version:
            changes.append(VersionCap(int(entry.api_key), int(entry.max_version), cap))
            entry = dataclasses.replace(entry, max_version=i16(cap))
        entries.append(entry)
    if not changes:
        return payload, changes
    return dataclasses.replace(payload, api_keys=tuple(entries)), changes


def iter_api_ranges(payload: Any) -> Iterable[tuple[int, int, int]]:
    """(api_key, min_version, max_version) of each entry of a decoded ApiVersions response."""
    for entry in payload.api_keys:
        yield int(entry.api_key), int(entry.min_version), int(entry.max_version)
