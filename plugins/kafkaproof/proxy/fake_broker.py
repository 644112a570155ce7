"""A tiny in-process fake Kafka cluster, for testing the proxy without a broker.

It speaks just enough of the protocol for a producer and a hand-driven reader: ApiVersions,
Metadata, InitProducerId, Produce, Fetch and ShareAcknowledge (every acknowledgement taken; a range that lists
it: `api_ranges`), every response encoded with kio. Produced record
batches are kept per partition with the offsets the fake assigned, so a test
can see exactly what "the broker wrote" — including the batches whose acks the
proxy dropped — and fetch them back. Each connection is served strictly in order, like a broker.
It is not a Kafka implementation: no groups, no replication, no waiting fetches.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import sys
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from . import protocol as kp
from .errors import KafkaProtocolError

log = logging.getLogger("kafkaproof.proxy.fake_broker")

INIT_PRODUCER_ID = 22

#: (min, max) versions the fake advertises; max values are capped at what kio knows.
DEFAULT_API_RANGES: Mapping[int, tuple[int, int]] = {
    kp.PRODUCE: (3, 11),
    # librdkafka only uses v2 record batches when the broker also lists Fetch v4+ (its
    # MsgVer2 feature check).
    kp.FETCH: (4, 12),
    kp.METADATA: (0, 12),
    kp.API_VERSIONS: (0, 4),
    INIT_PRODUCER_ID: (0, 4),
}

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA_AT = 23  # bytes into a v2 record batch


@dataclasses.dataclass
class StoredBatch:
    """A record batch the fake "wrote": where, at which offset, how many records, raw bytes."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    data: bytes
    correlation_id: int
    client_id: str | None


class FakeCluster:
    """Shared state of several fake brokers: topics, leaders, logs."""

    def __init__(self, topics: Mapping[str, int], cluster_id: str = "kafkaproof-fake") -> None:
        self.topics = dict(topics)
        self.topic_ids = {name: uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster_id}.{name}") for name in topics}
        self.cluster_id = cluster_id
        self.brokers: list[FakeBroker] = []
        self.logs: dict[tuple[str, int], list[StoredBatch]] = {}
        self.next_offset: dict[tuple[str, int], int] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self._producer_ids = iter(range(1000, 1 << 40))
        self.share_acknowledged = 0  # acknowledgement batches of the ShareAcknowledge requests answered

    def add_broker(self, node_id: int, **kwargs: Any) -> FakeBroker:
        """Create a broker of this cluster (start it with ``await broker.start()``)."""
        broker = FakeBroker(self, node_id, **kwargs)
        self.brokers.append(broker)
        return broker

    def leader(self, topic: str, partition: int) -> int:
        """Node id leading a partition (round-robin over brokers unless set in :attr:`leaders`)."""
        if (topic, partition) in self.leaders:
            return self.leaders[(topic, partition)]
        ids = sorted(b.node_id for b in self.brokers)
        return ids[partition % len(ids)]

    def append(self, topic: str, partition: int, records: bytes, correlation_id: int,
               client_id: str | None) -> int:
        """Store the batches of ``records``; returns the base offset assigned to the first."""
        key = (topic, partition)
        base = self.next_offset.get(key, 0)
        offset = base
        for batch in split_batches(records):
            count = batch_record_count(batch)
            self.logs.setdefault(key, []).append(
                StoredBatch(topic, partition, offset, count, batch, correlation_id, client_id))
            offset += count
        self.next_offset[key] = offset
        return base

    def records_written(self, topic: str | None = None) -> int:
        """Total records stored (optionally for one topic)."""
        return sum(b.record_count for (t, _), batches in self.logs.items() if topic in (None, t) for b in batches)

    def new_producer_id(self) -> int:
        """A fresh producer id for InitProducerId."""
        return next(self._producer_ids)


def split_batches(records: bytes) -> Iterable[bytes]:
    """Split a record set into its v2 record batches."""
    pos = 0
    while pos + _BATCH_HEAD.size <= len(records):
        _, length = _BATCH_HEAD.unpack_from(records, pos)
        end = pos + _BATCH_HEAD.size + length
        yield records[pos:end]
        pos = end


def batch_record_count(batch: bytes) -> int:
    """Records in a v2 batch (lastOffsetDelta + 1)."""
    if len(batch) < _LAST_OFFSET_DELTA_AT + 4:
        return 0
    return struct.unpack_from(">i", batch, _LAST_OFFSET_DELTA_AT)[0] + 1


class FakeBroker:
    """One fake broker listening on ``host:port`` (port 0: pick one)."""

    def __init__(self, cluster: FakeCluster, node_id: int, host: str = "127.0.0.1", port: int = 0,
                 api_ranges: Mapping[int, tuple[int, int]] | None = None,
                 delays: Mapping[int, float] | None = None, record_frames: bool = False) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.host, self.port = host, port
        self.api_ranges = {k: (lo, min(hi, kp.max_supported_version(k)))
                           for k, (lo, hi) in (api_ranges or DEFAULT_API_RANGES).items()}
        self.delays: dict[int, float] = dict(delays or {})
        self.requests: list[kp.RequestHeader] = []
        self.record_frames = record_frames
        self.frames_in: list[bytes] = []
        self.frames_out: list[bytes] = []
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        """``host:port`` the broker listens on (and advertises)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Close the listener and every connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                    frame = await reader.readexactly(int.from_bytes(head, "big"))
                except asyncio.IncompleteReadError:
                    return
                header = kp.parse_request_header(frame)
                self.requests.append(header)
                if self.record_frames:
                    self.frames_in.append(head + frame)
                delay = self.delays.get(header.api_key, 0.0)
                if delay:
                    await asyncio.sleep(delay)
                reply = self.handle(header, frame)
                if reply is not None:
                    if self.record_frames:
                        self.frames_out.append(reply)
                    writer.write(reply)
                    await writer.drain()
        except (ConnectionError, KafkaProtocolError) as exc:
            log.debug("fake broker %d connection ended: %s", self.node_id, exc)
        except asyncio.CancelledError:
            pass  # loop shutdown: end quietly (asyncio would log a cancelled handler as an error)
        finally:
            self._writers.discard(writer)
            writer.close()

    def handle(self, header: kp.RequestHeader, frame: bytes) -> bytes | None:
        """The framed response to one request (None: no response, e.g. acks=0)."""
        api, version = header.api_key, header.api_version
        lo_hi = self.api_ranges.get(api)
        if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
            if api == kp.API_VERSIONS:
                return self._api_versions(0, header.correlation_id, ErrorCode.unsupported_version)
            raise KafkaProtocolError(f"fake broker does not serve {kp.api_name(api)} v{version}")
        if api == kp.API_VERSIONS:
            return self._api_versions(version, header.correlation_id, ErrorCode.none)
        request = kp.decode_request(frame, header)
        if api == kp.METADATA:
            return kp.encode_response(self._metadata(request, version), header.correlation_id)
        if api == INIT_PRODUCER_ID:
            cls = kp.response_type(api, version)
            return kp.encode_response(kp.make_entity(
                cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none,
                producer_id=i64(self.cluster.new_producer_id()), producer_epoch=i16(0)), header.correlation_id)
        if api == kp.PRODUCE:
            response = self._produce(request, header)
            return None if request.acks == 0 else kp.encode_response(response, header.correlation_id)
        if api == kp.FETCH:
            return kp.encode_response(self._fetch(request, version), header.correlation_id)
        if api == kp.SHARE_ACKNOWLEDGE:  # every acknowledgement taken: NONE on each partition
            from .share_answers import build_share_error
            self.cluster.share_acknowledged += sum(len(p.acknowledgement_batches) for t in request.topics
                                                   for p in t.partitions)
            targets = kp.request_targets(request, {})
            return kp.encode_response(build_share_error(api, version, targets, ErrorCode.none, request),
                                      header.correlation_id)
        raise KafkaProtocolError(f"fake broker does not serve {kp.api_name(api)}")

    def _api_versions(self, version: int, correlation_id: int, error: ErrorCode) -> bytes:
        cls = kp.response_type(kp.API_VERSIONS, version)
        mod = sys.modules[cls.__module__]
        keys = tuple(mod.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                     for k, (lo, hi) in sorted(self.api_ranges.items()))
        return kp.encode_response(kp.make_entity(cls, error_code=error, api_keys=keys,
                                                 throttle_time=kp.ZERO_THROTTLE), correlation_id)

    def _metadata(self, request: Any, version: int) -> Any:
        cls = kp.response_type(kp.METADATA, version)
        mod = sys.modules[cls.__module__]
        brokers = tuple(kp.make_entity(mod.MetadataResponseBroker, node_id=i32(b.node_id), host=b.host,
                                       port=i32(b.port), rack=None)
                        for b in self.cluster.brokers)
        wanted = self._wanted_topics(request)
        topics = []
        for name, topic_id in wanted:
            if name in self.cluster.topics:
                parts = tuple(
                    kp.make_entity(mod.MetadataResponsePartition, error_code=ErrorCode.none,
                                   partition_index=i32(p), leader_id=i32(self.cluster.leader(name, p)),
                                   leader_epoch=i32(0), replica_nodes=(i32(self.cluster.leader(name, p)),),
                                   isr_nodes=(i32(self.cluster.leader(name, p)),), offline_replicas=())
                    for p in range(self.cluster.topics[name]))
                topics.append(kp.make_entity(mod.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
                                             topic_id=self.cluster.topic_ids[name], is_internal=False,
                                             partitions=parts))
            else:
                topics.append(kp.make_entity(mod.MetadataResponseTopic,
                                             error_code=ErrorCode.unknown_topic_or_partition, name=name,
                                             topic_id=topic_id or uuid.UUID(int=0), is_internal=False,
                                             partitions=()))
        return kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, brokers=brokers,
                              cluster_id=self.cluster.cluster_id, controller_id=i32(self.cluster.brokers[0].node_id),
                              topics=tuple(topics), error_code=ErrorCode.none)

    def _wanted_topics(self, request: Any) -> list[tuple[str, uuid.UUID | None]]:
        if request.topics is None or (request.__version__ == 0 and not request.topics):
            return [(name, self.cluster.topic_ids[name]) for name in self.cluster.topics]
        by_id = {v: k for k, v in self.cluster.topic_ids.items()}
        out = []
        for topic in request.topics:
            name = topic if isinstance(topic, str) else getattr(topic, "name", None)
            topic_id = getattr(topic, "topic_id", None)
            if name is None and topic_id is not None:
                name = by_id.get(topic_id, str(topic_id))
            out.append((name or "", topic_id))
        return out

    def _produce(self, request: Any, header: kp.RequestHeader) -> Any:
        cls = kp.response_type(kp.PRODUCE, header.api_version)
        mod = sys.modules[cls.__module__]
        by_id = {v: k for k, v in self.cluster.topic_ids.items()}
        topics = []
        for topic in request.topic_data:
            name = getattr(topic, "name", None) or by_id.get(getattr(topic, "topic_id", None), "")
            parts = []
            for part in topic.partition_data:
                index = int(part.index)
                if name not in self.cluster.topics or index >= self.cluster.topics[name]:
                    code, base = ErrorCode.unknown_topic_or_partition, -1
                elif self.cluster.leader(name, index) != self.node_id:
                    code, base = ErrorCode.not_leader_or_follower, -1
                else:
                    code = ErrorCode.none
                    base = self.cluster.append(name, index, bytes(part.records or b""),
                                               header.correlation_id, header.client_id)
                parts.append(kp.make_entity(mod.PartitionProduceResponse, index=i32(index), error_code=code,
                                            base_offset=i64(base), log_start_offset=i64(0), record_errors=(),
                                            error_message=None))
            topic_fields = {"topic_id": topic.topic_id} if hasattr(topic, "topic_id") else {"name": name}
            topics.append(kp.make_entity(mod.TopicProduceResponse, **topic_fields, partition_responses=tuple(parts)))
        return kp.make_entity(cls, responses=tuple(topics), throttle_time=kp.ZERO_THROTTLE)


    def _fetch(self, request: Any, version: int) -> Any:
        """Every stored batch at or after each partition's fetch offset, at the offsets the fake assigned."""
        cls = kp.response_type(kp.FETCH, version)
        mod = sys.modules[cls.__module__]
        by_id = {v: k for k, v in self.cluster.topic_ids.items()}
        topics = []
        for topic in request.topics:
            name = getattr(topic, "topic", None) or by_id.get(getattr(topic, "topic_id", None), "")
            parts = []
            for part in topic.partitions:
                index, start = int(part.partition), int(part.fetch_offset)
                stored = self.cluster.logs.get((name, index), [])
                data = b"".join(relocated(b.data, b.base_offset) for b in stored
                                if b.base_offset + b.record_count > start)
                high = self.cluster.next_offset.get((name, index), 0)
                parts.append(kp.make_entity(mod.PartitionData, partition_index=i32(index), error_code=ErrorCode.none,
                                            high_watermark=i64(high), last_stable_offset=i64(high),
                                            log_start_offset=i64(0), aborted_transactions=(), records=data,
                                            preferred_read_replica=i32(-1)))
            ident = {"topic_id": topic.topic_id} if hasattr(topic, "topic_id") else {"topic": name}
            topics.append(kp.make_entity(mod.FetchableTopicResponse, **ident, partitions=tuple(parts)))
        return kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0),
                              responses=tuple(topics), node_endpoints=())


# --------------------------------------------------------------------------- client-side helpers


def relocated(batch: bytes, base_offset: int) -> bytes:
    """A v2 batch moved to ``base_offset`` (outside its CRC)."""
    return struct.pack(">q", base_offset) + batch[8:]


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of v2 record batches."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _zigzag(value: int) -> bytes:
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    return _zigzag(-1) if data is None else _zigzag(len(data)) + data


def make_record_batch(values: Iterable[bytes | None], base_offset: int = 0, attributes: int = 0,
                      key: bytes | None = None, headers: Iterable[tuple[str, bytes | None]] = (),
                      base_timestamp: int = 0) -> bytes:
    """A real v2 record batch (valid CRC) of one record per value (each with ``key`` and ``headers``,
    timestamped ``base_timestamp``), uncompressed unless ``attributes`` say otherwise (then only
    the attribute is set: the records stay plain, for tests of what is skipped)."""
    records = []
    values = list(values)
    head_bytes = list(headers)
    encoded_headers = _zigzag(len(head_bytes)) + b"".join(
        _bytes_field(name.encode()) + _bytes_field(value) for name, value in head_bytes)
    for delta, value in enumerate(values):
        body = (b"\x00" + _zigzag(0) + _zigzag(delta) + _bytes_field(key) + _bytes_field(value)
                + encoded_headers)
        records.append(_zigzag(len(body)) + body)
    after_crc = (struct.pack(">hi", attributes, len(values) - 1) + struct.pack(">qq", base_timestamp, base_timestamp)
                 + struct.pack(">qhi", -1, -1, -1) + struct.pack(">i", len(values)) + b"".join(records))
    after_length = struct.pack(">ib", 0, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(after_length)) + after_length




def make_batch(record_count: int, payload: bytes = b"kp") -> bytes:
    """A v2-shaped record batch the fake broker can count (valid header fields, unchecked CRC).

    Only for frames sent by hand: real clients build real batches.
    """
    body = (struct.pack(">ib", 0, 2) + struct.pack(">i", 0) + struct.pack(">h", 0)
            + struct.pack(">i", record_count - 1) + struct.pack(">qq", 0, 0) + struct.pack(">qhi", -1, -1, -1)
            + struct.pack(">i", record_count) + payload)
    return struct.pack(">qi", 0, len(body)) + body


def produce_request(version: int, targets: Mapping[str, Iterable[int]], acks: int = -1,
                    records_per_partition: int = 1, transactional_id: str | None = None,
                    topic_ids: Mapping[str, uuid.UUID] | None = None) -> Any:
    """A kio Produce request of ``version`` writing a small batch to each topic/partition."""
    import datetime

    from kio.static.primitive import i32Timedelta

    cls = kp.request_type(kp.PRODUCE, version)
    mod = sys.modules[cls.__module__]
    topics = []
    for name, partitions in targets.items():
        parts = tuple(mod.PartitionProduceData(index=i32(p), records=make_batch(records_per_partition))
                      for p in partitions)
        ident = {"topic_id": (topic_ids or {})[name]} if version >= 13 else {"name": name}
        topics.append(mod.TopicProduceData(**ident, partition_data=parts))
    return kp.make_entity(cls, transactional_id=transactional_id, acks=i16(acks),
                          timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), topic_data=tuple(topics))


class RawClient:
    """A hand-driven Kafka connection: send kio requests, read raw or decoded responses."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.sent: list[bytes] = []

    async def connect(self, address: str) -> RawClient:
        """Open the connection to ``host:port``."""
        host, _, port = address.rpartition(":")
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        return self

    async def send(self, payload: Any, correlation_id: int, client_id: str | None = "raw-client") -> bytes:
        """Encode and send one request; returns the bytes sent."""
        assert self.writer is not None
        data = kp.encode_request(payload, correlation_id, client_id)
        self.sent.append(data)
        self.writer.write(data)
        await self.writer.drain()
        return data

    async def recv_raw(self, timeout: float = 5.0) -> bytes:
        """Next response frame, with its length prefix."""
        assert self.reader is not None

        async def read() -> bytes:
            assert self.reader is not None
            head = await self.reader.readexactly(4)
            return head + await self.reader.readexactly(int.from_bytes(head, "big"))

        return await asyncio.wait_for(read(), timeout)

    async def recv(self, api_key: int, version: int, timeout: float = 5.0) -> tuple[int, Any]:
        """Next response, decoded as ``api_key`` v``version``: (correlation id, payload)."""
        data = await self.recv_raw(timeout)
        frame = data[4:]
        return kp.response_correlation_id(frame), kp.decode_response(frame, api_key, version)

    async def close(self) -> None:
        """Close the connection."""
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
