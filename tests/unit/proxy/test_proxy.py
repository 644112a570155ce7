"""Unit tests of the Kafka-aware fault proxy (no Kafka broker: kio frames and a fake broker)."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from support import DATA, REPO

from kafkaproof.proxy import (
    ControlClient, ControlServer, FaultProxy, MemoryEventSink, ProxyProcess, Route, RuleError,
    parse_rule, read_events,
)
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy.errors import ControlError, KafkaProtocolError, ProxyError
from kafkaproof.proxy.fake_broker import FakeBroker, FakeCluster, RawClient, make_batch, produce_request
from kafkaproof.proxy.rules import Latency, Pacer, RuleState
from kafkaproof.proxy.server import format_hostport, parse_hostport

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

# Fake brokers advertise versions the proxy never caps, so pass-through is byte-exact.
PLAIN_RANGES = {kp.PRODUCE: (3, 9), kp.FETCH: (4, 12), kp.METADATA: (0, 12), kp.API_VERSIONS: (0, 4), 22: (0, 4)}


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Any:
    """Runs a coroutine on a fresh event loop: the stock one, and uvloop (what the CLI uses)."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run
    return asyncio.run


@dataclasses.dataclass
class Stack:
    cluster: FakeCluster
    brokers: list[FakeBroker]
    proxy: FaultProxy
    sink: MemoryEventSink

    def address(self, index: int = 0) -> str:
        host, port = self.proxy.listeners[index].advertised
        return f"{host}:{port}"

    async def client(self, index: int = 0) -> RawClient:
        return await RawClient().connect(self.address(index))

    def faults(self, **match: Any) -> list[dict[str, Any]]:
        return self.sink.of("fault", **match)


@contextlib.asynccontextmanager
async def stack(n_brokers: int = 1, topics: dict[str, int] | None = None, rewrite: bool = True,
                api_ranges: dict | None = None, delays: dict | None = None) -> AsyncIterator[Stack]:
    cluster = FakeCluster(topics or {"t": 3, "u": 2})
    brokers = [cluster.add_broker(i + 1, record_frames=True, api_ranges=api_ranges or PLAIN_RANGES, delays=delays)
               for i in range(n_brokers)]
    for broker in brokers:
        await broker.start()
    sink = MemoryEventSink()
    proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", b.port), broker=b.node_id) for b in brokers],
                       events=sink, rewrite=rewrite, seed=7)
    await proxy.start()
    try:
        yield Stack(cluster, brokers, proxy, sink)
    finally:
        await proxy.stop()
        for broker in brokers:
            await broker.stop()


def api_versions_request(version: int = 3) -> Any:
    cls = kp.request_type(kp.API_VERSIONS, version)
    return kp.make_entity(cls, client_software_name="test", client_software_version="1.0")


def metadata_request(version: int, topics: Iterable[str] | None = None) -> Any:
    cls = kp.request_type(kp.METADATA, version)
    mod = sys.modules[cls.__module__]
    entries = None
    if topics is not None:
        entries = tuple(kp.make_entity(mod.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        if version == 0:
            entries = entries or ()
    return kp.make_entity(cls, topics=entries, allow_auto_topic_creation=False,
                          include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def fetch_request(version: int, targets: dict[str, list[int]], topic_ids: dict[str, uuid.UUID] | None = None) -> Any:
    import datetime

    from kio.static.primitive import i32Timedelta, i64

    cls = kp.request_type(kp.FETCH, version)
    mod = sys.modules[cls.__module__]
    topics = []
    for name, parts in targets.items():
        ident = {"topic_id": (topic_ids or {})[name]} if version >= 13 else {"topic": name}
        topics.append(kp.make_entity(mod.FetchTopic, **ident, partitions=tuple(
            kp.make_entity(mod.FetchPartition, partition=i32(p), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20),
                           log_start_offset=i64(-1), current_leader_epoch=i32(-1), last_fetched_epoch=i32(-1))
            for p in parts)))
    return kp.make_entity(cls, replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
                          min_bytes=i32(1), max_bytes=i32(1 << 24), topics=tuple(topics), forgotten_topics_data=(),
                          rack_id="", session_id=i32(0), session_epoch=i32(-1))


def _has_response_schema(api_key: int, version: int) -> bool:
    try:
        kp.response_type(api_key, version)
        return True
    except kp.UnsupportedVersion:
        return False


def partition_errors(response: Any) -> list[tuple[str, int, int]]:
    """(topic, partition, error_code) of every partition in a Produce or Fetch response."""
    out = []
    for topic in response.responses:
        name = getattr(topic, "name", None) or getattr(topic, "topic", None) or str(getattr(topic, "topic_id", ""))
        parts = getattr(topic, "partition_responses", None) or getattr(topic, "partitions", ())
        for p in parts:
            index = getattr(p, "index", getattr(p, "partition_index", None))
            out.append((name, int(index), int(p.error_code)))
    return sorted(out)


# =========================================================================== framing and kio


@pytest.mark.parametrize("api_key,version", [(kp.PRODUCE, 3), (kp.PRODUCE, 8), (kp.PRODUCE, 9), (kp.PRODUCE, 13),
                                             (kp.METADATA, 0), (kp.METADATA, 9), (kp.METADATA, 13),
                                             (kp.API_VERSIONS, 0), (kp.API_VERSIONS, 3), (kp.FETCH, 4),
                                             (kp.FETCH, 12), (kp.FETCH, 16)])
def test_request_header_peek_and_kio_roundtrip(api_key: int, version: int) -> None:
    if api_key == kp.PRODUCE:
        payload = produce_request(version, {"t": [0, 2]}, acks=-1, topic_ids={"t": uuid.uuid4()})
    elif api_key == kp.METADATA:
        payload = metadata_request(version, ["t"])
    elif api_key == kp.FETCH:
        payload = fetch_request(version, {"t": [1]}, topic_ids={"t": uuid.uuid4()})
    else:
        payload = api_versions_request(version)
    data = kp.encode_request(payload, 4242, "client-é")
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    frame = data[4:]
    header = kp.parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (api_key, version, 4242, "client-é")
    assert kp.decode_request(frame, header) == payload


def test_request_header_with_null_client_id_and_tagged_fields() -> None:
    payload = produce_request(9, {"t": [0]}, acks=1)
    frame = kp.encode_request(payload, 1, None)[4:]
    header = kp.parse_request_header(frame)
    assert header.client_id is None
    # Flexible header: a tagged-field count follows client_id; the body starts after it.
    assert kp.request_body_offset(frame, header) == header.fixed_end + 1
    assert kp.decode_request(frame, header) == payload


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_and_targets_every_version(version: int, acks: int) -> None:
    ids = {"alpha": uuid.uuid4(), "beta": uuid.uuid4()}
    payload = produce_request(version, {"alpha": [0, 3], "beta": [1]}, acks=acks, records_per_partition=5,
                              transactional_id="txn-1" if version % 2 else None, topic_ids=ids)
    frame = kp.encode_request(payload, 9)[4:]
    header = kp.parse_request_header(frame)
    assert kp.produce_acks(frame, header) == acks
    names = {v: k for k, v in ids.items()}
    targets = kp.produce_targets(frame, header, names)
    assert [(t.topic, t.partitions) for t in targets] == [("alpha", (0, 3)), ("beta", (1,))]
    assert [t.record_counts for t in targets] == [(5, 5), (5,)]  # offsets each write takes
    assert targets == kp.request_targets(kp.decode_request(frame, header), names)


def test_record_batch_offsets_sums_batches_and_refuses_legacy_message_sets() -> None:
    two = make_batch(3) + make_batch(4)
    assert kp.record_batch_offsets(two, 0, len(two)) == 7
    legacy = bytearray(make_batch(3))
    legacy[16] = 1  # magic 1: a legacy message set, whose offsets the proxy does not count
    assert kp.record_batch_offsets(bytes(legacy), 0, len(legacy)) == -1
    assert kp.record_batch_offsets(two, 0, len(two) - 1) == -1  # truncated
    assert kp.record_batch_offsets(b"", 0, 0) == 0


RECORDED = json.loads((DATA / "librdkafka-frames.json").read_text())


@pytest.mark.parametrize("capture", sorted(RECORDED["captures"]))
def test_recorded_librdkafka_frames_parse_and_correlate(capture: str) -> None:
    """Frames a real librdkafka producer wrote (tests/data/capture_librdkafka_frames.py), parsed offline."""
    rec = RECORDED["captures"][capture]
    produced = 0
    for broker in rec["brokers"]:
        requests = [bytes.fromhex(h) for h in broker["requests"]]
        responses = [bytes.fromhex(h) for h in broker["responses"]]
        headers = []
        for data in requests:
            assert int.from_bytes(data[:4], "big") == len(data) - 4, "length prefix frames exactly one request"
            header = kp.parse_request_header(data[4:])
            assert header.client_id == "kafkaproof-capture"
            assert kp.decode_request(data[4:], header).__api_key__ == header.api_key  # the body decodes too
            headers.append(header)
            if header.api_key == kp.PRODUCE:
                targets = kp.produce_targets(data[4:], header)
                assert [t.topic for t in targets] == ["t"] and kp.produce_acks(data[4:], header) == -1
                assert all(n >= 1 for t in targets for n in t.record_counts)
                produced += sum(n for t in targets for n in t.record_counts)
        assert headers[0].api_key == kp.API_VERSIONS
        # each answer carries the correlation id of the request it answers, in order
        assert [kp.response_correlation_id(r[4:]) for r in responses] == [h.correlation_id for h in headers]
    assert produced == rec["records"] == rec["records_written"], "record counts match what the client sent"


def test_truncated_produce_is_a_protocol_error() -> None:
    frame = kp.encode_request(produce_request(9, {"t": [0]}), 1)[4:]
    header = kp.parse_request_header(frame)
    with pytest.raises(KafkaProtocolError):
        kp.produce_targets(frame[:-20], header)
    with pytest.raises(KafkaProtocolError):
        kp.parse_request_header(frame[:5])


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("code", [6, 7, 19, 20])
def test_produce_error_response_every_version(version: int, code: int) -> None:
    ids = {"a": uuid.uuid4(), "b": uuid.uuid4()}
    request = produce_request(version, {"a": [0, 1], "b": [4]}, topic_ids=ids)
    frame = kp.encode_request(request, 77)[4:]
    targets = kp.produce_targets(frame, kp.parse_request_header(frame), {v: k for k, v in ids.items()})
    data = kp.encode_error_response(kp.PRODUCE, version, targets, code, 77)
    response = kp.decode_response(data[4:], kp.PRODUCE, version)
    assert kp.response_correlation_id(data[4:]) == 77
    want_a = str(ids["a"]) if version >= 13 else "a"
    want_b = str(ids["b"]) if version >= 13 else "b"
    assert partition_errors(response) == sorted([(want_a, 0, code), (want_a, 1, code), (want_b, 4, code)])
    assert all(p.base_offset == -1 for t in response.responses for p in t.partition_responses)


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_error_response_every_version(version: int) -> None:
    ids = {"a": uuid.uuid4()}
    request = fetch_request(version, {"a": [0, 2]}, topic_ids=ids)
    targets = kp.request_targets(request, {v: k for k, v in ids.items()})
    data = kp.encode_error_response(kp.FETCH, version, targets, ErrorCode.not_leader_or_follower, 5)
    response = kp.decode_response(data[4:], kp.FETCH, version)
    name = str(ids["a"]) if version >= 13 else "a"
    assert partition_errors(response) == [(name, 0, 6), (name, 2, 6)]


def test_error_injection_refuses_other_apis() -> None:
    with pytest.raises(kp.UnsupportedVersion, match="error injection supports .*heartbeat.*; not metadata"):
        kp.build_error_response(kp.METADATA, 9, [], 6)


def _errors_in(entity: Any) -> list[int]:
    """Every error code anywhere in a decoded response."""
    out = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            out.append(int(value))
        elif isinstance(value, tuple):
            out += [code for item in value if dataclasses.is_dataclass(item) for code in _errors_in(item)]
    return out


_GROUP_AND_TXN_APIS = sorted(kp.ERROR_APIS - {kp.PRODUCE, kp.FETCH, *kp.SHARE_PARTITION_APIS})  # share: test_share_answers.py


@pytest.mark.parametrize("api_key,version", [(k, v) for k in _GROUP_AND_TXN_APIS
                                             for v in range(kp.max_supported_version(k) + 1)
                                             if _has_response_schema(k, v)])
def test_error_response_of_every_group_coordinator_and_transaction_api(api_key: int, version: int) -> None:
    """Each answer encodes and decodes at every version kio has, and carries the error where the client
    reads it: on each partition the request named, on each coordinator key, or at the top."""
    targets = [kp.TopicPartitions("t", (0, 2), uuid.UUID(int=7))]
    request = SimpleNamespace(coordinator_keys=("group-a", "group-b"))
    data = kp.encode_error_response(api_key, version, targets, ErrorCode.rebalance_in_progress, 9, request)
    response = kp.decode_response(data[4:], api_key, version)
    assert kp.response_correlation_id(data[4:]) == 9
    errors = _errors_in(response)
    if api_key in (kp.OFFSET_COMMIT, kp.TXN_OFFSET_COMMIT) or (api_key == kp.ADD_PARTITIONS_TO_TXN and version <= 3):
        assert errors == [27, 27]  # a partition each
    elif api_key == kp.FIND_COORDINATOR and version >= 4:
        assert errors == [27, 27] and [c.key for c in response.coordinators] == ["group-a", "group-b"]
    else:
        assert errors[0] == 27 and set(errors) == {27}


def test_api_key_and_error_code_names() -> None:
    assert kp.api_key_of("produce") == kp.api_key_of("Produce") == kp.api_key_of("0") == 0
    assert kp.api_key_of("FindCoordinator") == kp.api_key_of("find_coordinator") == 10
    assert int(kp.error_code_of("NOT_ENOUGH_REPLICAS_AFTER_APPEND")) == 20
    assert int(kp.error_code_of(7)) == 7
    with pytest.raises(ValueError):
        kp.api_key_of("nope")
    with pytest.raises(ValueError):
        kp.error_code_of(99999)


def _metadata_response(version: int) -> Any:
    cls = kp.response_type(kp.METADATA, version)
    mod = sys.modules[cls.__module__]
    brokers = tuple(kp.make_entity(mod.MetadataResponseBroker, node_id=i32(n), host="broker-host", port=i32(9000 + n),
                                   rack=None) for n in (1, 2, 3))
    part = kp.make_entity(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=i32(0),
                          leader_id=i32(2), replica_nodes=(i32(2),), isr_nodes=(i32(2),), offline_replicas=())
    topic = kp.make_entity(mod.MetadataResponseTopic, error_code=ErrorCode.none, name="t",
                           topic_id=uuid.UUID(int=12345), is_internal=False, partitions=(part,))
    return kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, brokers=brokers, cluster_id="c",
                          controller_id=i32(1), topics=(topic,), error_code=ErrorCode.none)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_rewrite_every_version(version: int) -> None:
    payload = _metadata_response(version)
    data = kp.encode_response(payload, 3)
    decoded = kp.decode_response(data[4:], kp.METADATA, version)
    assert decoded == payload
    mapping = {1: ("127.0.0.1", 19001), 2: ("127.0.0.1", 19002)}
    rewritten, changes = kp.rewrite_addresses(decoded, lambda n, h, p: mapping.get(n))
    assert [(c.node_id, c.new) for c in changes] == [(1, ("127.0.0.1", 19001)), (2, ("127.0.0.1", 19002))]
    again = kp.decode_response(kp.encode_response(rewritten, 3)[4:], kp.METADATA, version)
    assert [(b.node_id, b.host, b.port) for b in again.brokers] == \
        [(1, "127.0.0.1", 19001), (2, "127.0.0.1", 19002), (3, "broker-host", 9003)]
    assert again.topics == decoded.topics
    if version >= 10:
        assert kp.metadata_topic_ids(again) == {uuid.UUID(int=12345): "t"}


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_rewrite_every_version(version: int) -> None:
    cls = kp.response_type(kp.FIND_COORDINATOR, version)
    mod = sys.modules[cls.__module__]
    if version >= 4:
        payload = kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, coordinators=(
            kp.make_entity(mod.Coordinator, key="group", node_id=i32(2), host="b2", port=i32(9092),
                           error_code=ErrorCode.none, error_message=None),))
    else:
        payload = kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                                 node_id=i32(2), host="b2", port=i32(9092))
    decoded = kp.decode_response(kp.encode_response(payload, 1)[4:], kp.FIND_COORDINATOR, version)
    rewritten, changes = kp.rewrite_addresses(decoded, lambda n, h, p: ("proxy", 29092) if n == 2 else None)
    assert len(changes) == 1
    out = kp.decode_response(kp.encode_response(rewritten, 1)[4:], kp.FIND_COORDINATOR, version)
    entity = out.coordinators[0] if version >= 4 else out
    assert (entity.host, entity.port) == ("proxy", 29092)


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster_rewrite(version: int) -> None:
    cls = kp.response_type(kp.DESCRIBE_CLUSTER, version)
    mod = sys.modules[cls.__module__]
    payload = kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none, cluster_id="c",
                             brokers=(kp.make_entity(mod.DescribeClusterBroker, broker_id=i32(1), host="b1",
                                                     port=i32(9092), is_fenced=False),))
    rewritten, changes = kp.rewrite_addresses(payload, lambda n, h, p: ("proxy", 1))
    assert changes and rewritten.brokers[0].host == "proxy"


def test_api_versions_caps() -> None:
    cls = kp.response_type(kp.API_VERSIONS, 3)
    mod = sys.modules[cls.__module__]
    payload = kp.make_entity(cls, error_code=ErrorCode.none, throttle_time=kp.ZERO_THROTTLE, api_keys=(
        mod.ApiVersion(api_key=i16(0), min_version=i16(3), max_version=i16(12)),
        mod.ApiVersion(api_key=i16(1), min_version=i16(4), max_version=i16(17)),
        mod.ApiVersion(api_key=i16(3), min_version=i16(0), max_version=i16(13))))
    capped, changes = kp.cap_api_versions(payload, {0: 9, 1: 2, 3: 13})
    assert [(c.api_key, c.old_max, c.new_max) for c in changes] == [(0, 12, 9)]
    assert [int(e.max_version) for e in capped.api_keys] == [9, 17, 13]  # fetch min 4 > cap 2: left alone
    data = kp.encode_response(capped, 1)
    assert kp.decode_response(data[4:], kp.API_VERSIONS, 3) == capped
    assert data[8:10] == b"\x00\x00"  # header v0 even though v3 is flexible: error_code follows corr id


# =========================================================================== rules


def test_parse_rule_normalises_and_round_trips() -> None:
    rule = parse_rule({"action": "lost_ack", "api": ["Produce"], "topic": "t", "partitions": [1, 0],
                       "count": 3, "probability": 0.5, "reset": True})
    assert rule.api == frozenset({0}) and rule.partitions == frozenset({0, 1})
    assert parse_rule(rule.as_json()) == rule
    latency = parse_rule({"action": "latency", "api": "produce", "min_ms": 10, "max_ms": 20})
    assert latency.latency == Latency("uniform", 10.0, 20.0) and latency.direction == "response"
    err = parse_rule({"action": "error", "api": "produce", "error": "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                      "forward": True})
    assert err.error == 20 and err.forward


@pytest.mark.parametrize("spec,fragment", [
    ({"action": "explode"}, "'action'"),
    ({"action": "error", "api": "produce"}, "needs 'error'"),
    ({"action": "error", "api": "metadata", "error": 6}, "limited to APIs whose answers it can build"),
    ({"action": "error", "api": "produce", "error": "NO_SUCH_ERROR"}, "'error'"),
    ({"action": "latency"}, "'ms'"),
    ({"action": "latency", "ms": 5, "direction": "sideways"}, "'direction'"),
    ({"action": "lost_ack", "probability": 2}, "'probability'"),
    ({"action": "lost_ack", "count": 0}, "'count'"),
    ({"action": "lost_ack", "api": "produce", "partitions": ["x"]}, "'partitions'"),
    ({"action": "lost_ack", "topic": "t"}, "'topic'"),
    ({"action": "lost_ack", "bytes_per_s": 5}, "unknown field"),
    ({"action": "bandwidth"}, "'bytes_per_s'"),
    ({"action": "blackhole", "api": "nope"}, "'api'"),
])
def test_parse_rule_rejects_with_field_name(spec: dict, fragment: str) -> None:
    with pytest.raises(RuleError, match=fragment):
        parse_rule(spec)


def test_rule_state_window_count_and_probability() -> None:
    state = RuleState(parse_rule({"action": "lost_ack", "count": 2, "start_after_s": 1, "duration_s": 2}), 100.0)
    assert not state.active(100.5) and state.active(101.0) and not state.active(103.0)
    assert state.fire() and not state.expired and state.fire() and state.expired and not state.fire()
    rng = random.Random(1)
    half = RuleState(parse_rule({"action": "lost_ack", "probability": 0.5}), 0.0)
    hits = sum(half.roll(rng) for _ in range(2000))
    assert 850 < hits < 1150


def test_latency_distributions() -> None:
    rng = random.Random(3)
    assert Latency("fixed", 250).sample_s(rng) == 0.25
    uniform = [Latency("uniform", 10, 20).sample_s(rng) for _ in range(500)]
    assert 0.010 <= min(uniform) and max(uniform) <= 0.020
    normal = [Latency("normal", 100, 10).sample_s(rng) for _ in range(2000)]
    assert 0.095 < sum(normal) / len(normal) < 0.105 and min(normal) >= 0


def test_pacer_schedules_back_to_back() -> None:
    pacer = Pacer(1000)
    assert pacer.reserve(500, 10.0) == 10.0
    assert pacer.reserve(500, 10.0) == 10.5
    assert pacer.reserve(10, 20.0) == 20.0


def test_route_and_hostport_parsing() -> None:
    route = Route.parse("3@127.0.0.1:0=kafka-3:9092")
    assert (route.broker, route.listen, route.upstream) == (3, ("127.0.0.1", 0), ("kafka-3", 9092))
    assert parse_hostport("[::1]:9092") == ("::1", 9092)
    with pytest.raises(ProxyError):
        Route.parse("127.0.0.1:1")


# =========================================================================== proxy + fake broker


def test_pass_through_is_byte_exact(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            client = await s.client()
            await client.send(api_versions_request(3), 1)
            received = [await client.recv_raw()]
            for corr, acks in ((2, -1), (3, 1), (4, -1)):
                await client.send(produce_request(9, {"t": [0, 1], "u": [1]}, acks=acks), corr)
            received += [await client.recv_raw() for _ in range(3)]
            await client.close()
            broker = s.brokers[0]
            assert broker.frames_in == client.sent
            assert broker.frames_out == received
            assert s.cluster.records_written() == 9
            assert not s.faults()
            assert not s.sink.of("api_versions_capped")
    run(scenario())


def test_lost_ack_drops_exactly_the_matching_response(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            rule_id = s.proxy.add_rule({"action": "lost_ack", "api": "produce", "topic": "u", "count": 1})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 10)
            await client.send(produce_request(9, {"u": [1]}), 11)  # its ack is lost
            await client.send(produce_request(9, {"u": [0]}), 12)
            await client.send(api_versions_request(3), 13)
            got = [kp.response_correlation_id((await client.recv_raw())[4:]) for _ in range(3)]
            assert got == [10, 12, 13]
            with pytest.raises(asyncio.TimeoutError):
                await client.recv_raw(timeout=0.3)
            assert [b.correlation_id for b in s.cluster.logs[("u", 1)]] == [11]  # the broker did write it
            phases = [(e["phase"], e["correlation_id"]) for e in s.faults(rule_id=rule_id)]
            assert phases == [("request_forwarded", 11), ("response_dropped", 11)]
            dropped = s.faults(phase="response_dropped")[0]
            assert dropped["action"] == "lost_ack" and dropped["api"] == "produce"
            assert dropped["topics"] == [{"topic": "u", "partitions": [1], "record_counts": [1]}]
            assert dropped["detail"]["results"] == [
                {"topic": "u", "partition": 1, "error_code": 0, "error": "NONE", "base_offset": 0}]
            assert s.sink.of("rule_expired", rule_id=rule_id)
            await client.close()
    run(scenario())


def test_lost_ack_with_reset_delivers_earlier_responses_then_resets(run: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.PRODUCE: 0.05}) as s:
            s.proxy.add_rule({"action": "lost_ack", "api": "produce", "partitions": [2], "topic": "t",
                              "reset": True})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await client.send(produce_request(9, {"t": [2]}), 2)
            await client.send(produce_request(9, {"t": [1]}), 3)
            first = await client.recv_raw()
            assert kp.response_correlation_id(first[4:]) == 1
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await client.recv_raw()
            await asyncio.sleep(0.1)
            assert s.cluster.records_written() >= 2  # the faulted batch was written
            assert [b.correlation_id for b in s.cluster.logs[("t", 2)]] == [2]
            close = s.sink.of("conn_close")[-1]
            assert close["detail"]["rst"] is True
    run(scenario())


def test_lost_ack_reset_reports_the_answers_pipelined_behind_it(run: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.METADATA: 1.0}) as s:
            lost = s.proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1, "reset": True})
            # Holds the reset back 300 ms, so the answers pipelined behind it arrive first.
            s.proxy.add_rule({"action": "latency", "api": "produce", "ms": 300, "count": 1})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, records_per_partition=2), 1)  # ack dropped
            await client.send(produce_request(9, {"t": [1]}, records_per_partition=3), 2)  # answered
            await client.send(produce_request(9, {"t": [0]}), 3)                           # answered
            await client.send(metadata_request(9, ["t"]), 4)  # the broker takes 1 s: no answer at the reset
            await client.send(produce_request(9, {"t": [2]}), 5)  # queued behind it at the broker
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await client.recv_raw()
            (dropped,) = s.faults(phase="response_dropped")
            assert dropped["correlation_id"] == 1 and dropped["detail"]["reset"] is True
            discarded = s.faults(phase="response_discarded")
            assert [e["correlation_id"] for e in discarded] == [2, 3, 4]
            # The broker had the fifth request: the proxy reads its answer after the reset.
            await _until(lambda: len(s.faults(phase="response_discarded")) == 4)
            discarded = s.faults(phase="response_discarded")
            assert {(e["rule_id"], e["action"]) for e in discarded} == {(lost, "lost_ack")}
            logs = s.cluster.logs
            assert [(b.correlation_id, b.base_offset) for b in logs[("t", 0)]] == [(1, 0), (3, 2)]
            second, third, metadata, fifth = discarded
            assert second["detail"] == {"caused_by": "response_dropped", "response_received": True, "results": [
                {"topic": "t", "partition": 1, "error_code": 0, "error": "NONE", "base_offset": 0}]}
            # The rules had expired when it arrived; its topics are reported all the same.
            assert second["topics"] == [{"topic": "t", "partitions": [1], "record_counts": [3]}]
            assert third["detail"]["results"][0]["base_offset"] == 2 and third["topics"][0]["partitions"] == [0]
            assert metadata["api"] == "metadata"
            assert metadata["detail"] == {"caused_by": "response_dropped", "response_received": False}
            assert fifth["detail"] == {"caused_by": "response_dropped", "response_received": True, "after_reset": True,
                                       "results": [{"topic": "t", "partition": 2, "error_code": 0, "error": "NONE",
                                                    "base_offset": 0}]}
            assert fifth["topics"] == [{"topic": "t", "partitions": [2], "record_counts": [1]}]
            close = s.sink.of("conn_close")[-1]
            assert close["detail"]["rst"] is True and close["detail"]["in_flight"] == 2
            assert close["ts_ns"] < fifth["ts_ns"] and not s.proxy.listeners[0].awaiting
            await client.close()
    run(scenario())


def test_a_reset_awaits_the_answers_of_the_produce_requests_the_broker_has(run: Any, monkeypatch: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.PRODUCE: 0.3}) as s:
            s.proxy.add_rule({"action": "latency", "api": "produce", "client_id": "slow", "direction": "request",
                              "ms": 5000})
            rid = s.proxy.add_rule({"action": "reset", "client_id": "resetter"})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, records_per_partition=2), 1)  # at the broker
            await client.send(produce_request(9, {"t": [1]}), 2)                           # queued there
            await client.send(produce_request(9, {"t": [2]}), 3, client_id="slow")  # held back: never sent
            await _until(lambda: len(s.brokers[0].requests) == 1)  # the broker works on the first
            await client.send(api_versions_request(3), 4, client_id="resetter")
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await client.recv_raw()
            # At the reset: the request the broker never got, without results.
            assert [(e["correlation_id"], e["detail"]) for e in s.faults(phase="response_discarded")] == [
                (3, {"caused_by": "connection_reset", "response_received": False})]
            assert s.proxy.listeners[0].awaiting
            # Then the answers to the two the broker had, as they come, with what it wrote.
            await _until(lambda: len(s.faults(phase="response_discarded")) == 3)
            first, second = s.faults(phase="response_discarded")[1:]
            assert [(e["correlation_id"], e["rule_id"], e["topics"]) for e in (first, second)] == [
                (1, rid, [{"topic": "t", "partitions": [0], "record_counts": [2]}]),
                (2, rid, [{"topic": "t", "partitions": [1], "record_counts": [1]}])]
            assert first["detail"] == {"caused_by": "connection_reset", "response_received": True,
                                       "after_reset": True, "results": [
                                           {"topic": "t", "partition": 0, "error_code": 0, "error": "NONE",
                                            "base_offset": 0}]}
            assert second["detail"]["results"][0]["partition"] == 1 and second["detail"]["after_reset"] is True
            assert not s.proxy.listeners[0].awaiting and ("t", 2) not in s.cluster.logs
            await client.close()
            # An answer that does not come in time is reported without results, as is one still
            # awaited when the proxy stops.
            monkeypatch.setattr("kafkaproof.proxy.connection._AWAIT_AFTER_RESET_S", 0.1)
            s.brokers[0].delays[kp.PRODUCE] = 1.0
            for n in range(2):
                other = await s.client()
                await other.send(produce_request(9, {"t": [0]}), 1)
                await _until(lambda: len(s.brokers[0].requests) == 3 + n)
                await other.send(api_versions_request(3), 2, client_id="resetter")
                with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                    await other.recv_raw()
                if n == 0:
                    await _until(lambda: len(s.faults(phase="response_discarded")) == 4)
                else:
                    assert s.proxy.listeners[0].awaiting
                    await s.proxy.stop()
                assert s.faults(phase="response_discarded")[-1]["detail"] == {
                    "caused_by": "connection_reset", "response_received": False}
                assert not s.proxy.listeners[0].awaiting
                await other.close()
    run(scenario())


def test_reset_rules_report_the_answers_they_discard(run: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.METADATA: 0.5}) as s:
            # Without after_bytes: the answers still owed on the connection are lost.
            rid = s.proxy.add_rule({"action": "reset", "client_id": "resetter"})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await client.recv_raw()  # delivered before the reset: not discarded
            await client.send(metadata_request(9, ["t"]), 2)
            await client.send(api_versions_request(3), 3, client_id="resetter")
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await client.recv_raw()
            assert [(e["phase"], e["correlation_id"]) for e in s.faults(rule_id=rid)] == [
                ("connection_reset", 3), ("response_discarded", 2)]
            assert s.faults(phase="response_discarded")[0]["detail"] == {
                "caused_by": "connection_reset", "response_received": False}
            s.proxy.remove_rule(rid)
            # With after_bytes on responses: the torn answer is discarded too, with what it said.
            rid = s.proxy.add_rule({"action": "reset", "api": "produce", "direction": "response",
                                    "after_bytes": 10})
            other = await s.client()
            await other.send(produce_request(9, {"t": [1]}), 1)
            await other.send(metadata_request(9, ["t"]), 2)
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await other.recv_raw()
            events = s.faults(rule_id=rid)
            assert [(e["phase"], e["correlation_id"]) for e in events] == [
                ("connection_reset", 1), ("response_discarded", 1), ("response_discarded", 2)]
            assert events[1]["detail"] == {"caused_by": "connection_reset", "response_received": True, "results": [
                {"topic": "t", "partition": 1, "error_code": 0, "error": "NONE", "base_offset": 0}]}
            assert events[2]["detail"]["response_received"] is False
            await client.close()
            await other.close()
    run(scenario())


def test_a_lost_ack_with_reset_reports_the_answers_written_while_it_was_due(run: Any) -> None:
    """The Java client reads one answer per poll and, when a write to a connection the proxy reset fails
    first, closes it with the answers it had not read and re-sends their requests (issue 36.6: 3 and 12
    duplicates of two runs were such writes, left unattributed). Every Produce answer written to the
    client after a lost ack's request was forwarded, before the reset, is reported with what the broker
    wrote and `delivered: true`; one written before it is not (a client with one request in flight
    had read it before it sent the next)."""
    async def scenario() -> None:
        async with stack(delays={kp.PRODUCE: 0.2}) as s:
            rid = s.proxy.add_rule({"action": "lost_ack", "reset": True, "client_id": "victim"})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await client.recv_raw()  # read before the lost ack's request: not reported
            await client.send(produce_request(9, {"t": [1]}, records_per_partition=3), 2)
            await client.send(produce_request(9, {"t": [2]}), 3)
            await client.send(produce_request(9, {"t": [0]}), 4, client_id="victim")
            await _until(lambda: s.faults(phase="response_dropped"))
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                while True:  # answers 2 and 3 were written before the reset (this client reads them all)
                    await client.recv_raw()
            discarded = s.faults(phase="response_discarded")
            assert [(e["correlation_id"], e["rule_id"], e["topics"]) for e in discarded] == [
                (2, rid, [{"topic": "t", "partitions": [1], "record_counts": [3]}]),
                (3, rid, [{"topic": "t", "partitions": [2], "record_counts": [1]}])]
            for e in discarded:
                assert 0 <= e["detail"].pop("written_ms_before_reset") < 1000
                assert e["detail"] == {"caused_by": "response_dropped", "response_received": True,
                                       "delivered": True, "results": [
                                           {"topic": "t", "partition": e["topics"][0]["partitions"][0],
                                            "error_code": 0, "error": "NONE", "base_offset": 0}]}
            await client.close()
    run(scenario())


def test_closes_not_caused_by_a_rule_discard_nothing(run: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.PRODUCE: 0.3}) as s:

            async def owe_two_answers() -> RawClient:
                client = await s.client()
                seen = len(s.brokers[0].requests)
                await client.send(produce_request(9, {"t": [0]}), 1)
                await client.send(produce_request(9, {"t": [1]}), 2)
                await _until(lambda: len(s.brokers[0].requests) > seen)  # the broker is working on them
                return client

            def closes() -> list[dict[str, Any]]:
                return s.sink.of("conn_close")

            await (await owe_two_answers()).close()  # the client leaves
            await _until(lambda: len(closes()) == 1)
            staying = await owe_two_answers()
            await s.brokers[0].stop()  # the broker goes away
            await _until(lambda: len(closes()) == 2)
            assert [(e["detail"]["rst"], e["detail"]["in_flight"]) for e in closes()] == [(False, 2), (False, 2)]
            assert not s.faults()
            await staying.close()
    run(scenario())


def test_answers_a_latency_rule_still_holds_when_the_client_gives_up_are_reported(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            held = s.proxy.add_rule({"action": "latency", "api": "produce", "ms": 5000})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, records_per_partition=2), 1)
            await client.send(produce_request(9, {"t": [0]}), 2)
            await client.send(metadata_request(9, ["t"]), 3)  # not delayed itself, but queued behind them
            await _until(lambda: len(s.cluster.logs.get(("t", 0), [])) == 2)  # the broker wrote both
            await client.close()  # the client gives up (as on request.timeout.ms) before the answers come
            await _until(lambda: len(s.faults(phase="response_discarded")) == 3)
            discarded = s.faults(phase="response_discarded")
            assert [(e["correlation_id"], e["rule_id"], e["action"]) for e in discarded] == [
                (1, held, "latency"), (2, held, "latency"), (3, held, "latency")]
            assert discarded[0]["detail"] == {"caused_by": "delayed", "response_received": True, "results": [
                {"topic": "t", "partition": 0, "error_code": 0, "error": "NONE", "base_offset": 0}]}
            assert discarded[1]["detail"]["results"][0]["base_offset"] == 2
            assert discarded[2]["api"] == "metadata" and "results" not in discarded[2]["detail"]
            # Answers the rule already let through are not reported when the connection closes later.
            s.proxy.remove_rule(held)
            s.proxy.add_rule({"action": "latency", "api": "produce", "ms": 50})
            other = await s.client()
            await other.send(produce_request(9, {"t": [1]}), 1)
            await other.recv_raw()
            await other.close()
            await _until(lambda: len(s.sink.of("conn_close")) == 2)
            assert len(s.faults(phase="response_discarded")) == 3
    run(scenario())


async def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_error_without_forwarding_answers_every_partition(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "error", "api": "produce", "error": "NOT_ENOUGH_REPLICAS"})
            client = await s.client()
            for version in (3, 7, 9):
                await client.send(produce_request(version, {"t": [0, 1, 2], "u": [1]}), 100 + version)
                corr, response = await client.recv(kp.PRODUCE, version)
                assert corr == 100 + version
                assert partition_errors(response) == [("t", 0, 19), ("t", 1, 19), ("t", 2, 19), ("u", 1, 19)]
            assert s.cluster.records_written() == 0
            assert not [h for h in s.brokers[0].requests if h.api_key == kp.PRODUCE]
            events = s.faults(phase="answered_without_forwarding")
            assert len(events) == 3 and events[0]["detail"]["error"] == "NOT_ENOUGH_REPLICAS"
            await client.close()
    run(scenario())


def test_injected_error_waits_behind_slower_real_response(run: Any) -> None:
    async def scenario() -> None:
        async with stack(delays={kp.PRODUCE: 0.2}) as s:
            s.proxy.add_rule({"action": "error", "api": "produce", "topic": "t", "partitions": [1], "error": 6})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 1)  # real, answered after 200 ms
            await client.send(produce_request(9, {"t": [1]}), 2)  # answered by the proxy at once...
            first, second = await client.recv(kp.PRODUCE, 9), await client.recv(kp.PRODUCE, 9)
            assert (first[0], second[0]) == (1, 2)  # ...but delivered in request order
            assert partition_errors(first[1]) == [("t", 0, 0)] and partition_errors(second[1]) == [("t", 1, 6)]
            await client.close()
    run(scenario())


def test_error_after_forwarding_replaces_the_real_response(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "error", "api": "produce", "error": 20, "forward": True, "count": 1})
            client = await s.client()
            await client.send(produce_request(9, {"t": [1]}), 1)
            await client.send(produce_request(9, {"t": [1]}), 2)
            _, first = await client.recv(kp.PRODUCE, 9)
            _, second = await client.recv(kp.PRODUCE, 9)
            assert partition_errors(first) == [("t", 1, 20)]
            assert partition_errors(second) == [("t", 1, 0)]
            assert [b.base_offset for b in s.cluster.logs[("t", 1)]] == [0, 1]
            replaced = s.faults(phase="response_replaced")[0]
            assert replaced["detail"]["results"][0]["base_offset"] == 0
            await client.close()
    run(scenario())


def test_fetch_error_injection_without_a_fetch_capable_broker(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "error", "api": "fetch", "error": "NOT_LEADER_OR_FOLLOWER"})
            client = await s.client()
            await client.send(fetch_request(12, {"t": [0, 2]}), 5)
            corr, response = await client.recv(kp.FETCH, 12)
            assert corr == 5 and partition_errors(response) == [("t", 0, 6), ("t", 2, 6)]
            await client.close()
    run(scenario())


def test_response_latency_delays_the_stream_without_reordering(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "latency", "api": "produce", "ms": 300, "count": 1})
            client = await s.client()
            start = time.monotonic()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await client.send(api_versions_request(3), 2)  # not delayed itself, but queued behind 1
            first = await client.recv_raw()
            t_first = time.monotonic() - start
            second = await client.recv_raw()
            t_second = time.monotonic() - start
            assert [kp.response_correlation_id(f[4:]) for f in (first, second)] == [1, 2]
            assert 0.28 <= t_first < 1.0 and t_second >= t_first
            # the broker got and answered both at once: only the response was held
            assert len(s.brokers[0].frames_out) == 2
            delayed = s.faults(phase="delayed")
            assert len(delayed) == 1 and delayed[0]["detail"] == {"direction": "response", "delay_ms": 300.0}
            await client.close()
    run(scenario())


def test_request_latency_delays_forwarding(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "latency", "api": "produce", "direction": "request", "ms": 250})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await asyncio.sleep(0.15)
            assert not s.brokers[0].requests
            await client.recv_raw()
            assert len(s.brokers[0].requests) == 1
            await client.close()
    run(scenario())


def test_acks_zero_produce_keeps_correlation(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, acks=0), 1)
            await client.send(produce_request(9, {"t": [1]}, acks=1), 2)
            await client.send(produce_request(7, {"t": [2]}, acks=0), 3)
            await client.send(api_versions_request(3), 4)
            got = [kp.response_correlation_id((await client.recv_raw())[4:]) for _ in range(2)]
            assert got == [2, 4]
            assert s.cluster.records_written() == 3
            assert not s.sink.of("protocol_error")
            # an error rule on acks=0 cannot answer: the request is dropped, the stream goes on
            s.proxy.add_rule({"action": "error", "api": "produce", "error": 6, "count": 1})
            await client.send(produce_request(9, {"t": [0]}, acks=0), 5)
            await client.send(api_versions_request(3), 6)
            assert kp.response_correlation_id((await client.recv_raw())[4:]) == 6
            assert s.faults(phase="request_dropped")[0]["acks_zero"] is True
            assert s.cluster.records_written() == 3
            await client.close()
    run(scenario())


def test_lost_ack_ignores_acks_zero(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, acks=0), 1)
            await client.send(produce_request(9, {"t": [0]}, acks=1), 2)
            await client.send(api_versions_request(3), 3)
            assert kp.response_correlation_id((await client.recv_raw())[4:]) == 3
            assert s.faults(phase="response_dropped")[0]["correlation_id"] == 2
            await client.close()
    run(scenario())


def test_blackhole_and_immediate_reset(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            rid = s.proxy.add_rule({"action": "blackhole", "api": "produce"})
            client = await s.client()
            await client.send(api_versions_request(3), 1)
            await client.recv_raw()
            await client.send(produce_request(9, {"t": [0]}), 2)
            await client.send(api_versions_request(3), 3)  # stuck behind the black hole
            with pytest.raises(asyncio.TimeoutError):
                await client.recv_raw(timeout=0.3)
            assert s.cluster.records_written() == 0
            assert [e["phase"] for e in s.faults(rule_id=rid)] == ["request_discarded", "request_discarded"]
            s.proxy.remove_rule(rid)
            s.proxy.add_rule({"action": "reset", "api": "metadata"})
            other = await s.client()
            await other.send(metadata_request(9, ["t"]), 1)
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await other.recv_raw()
            assert not [h for h in s.brokers[0].requests if h.api_key == kp.METADATA]
            await client.close()
    run(scenario())


def test_reset_after_bytes_cuts_the_frame(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "reset", "api": "produce", "direction": "request", "after_bytes": 150})
            client = await s.client()
            sent = await client.send(produce_request(9, {"t": [0]}), 1)
            sent += await client.send(produce_request(9, {"t": [0]}), 2)
            assert len(sent) > 150
            with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                await client.recv_raw()
            event = s.faults(phase="connection_reset")[0]
            first = len(client.sent[0])
            assert event["detail"]["bytes_written"] == 150 - first  # exactly after_bytes went upstream
            assert len(s.brokers[0].requests) == 1
            # The torn request never reached the broker whole: only the answer still owed before it
            # (if it was not delivered yet) is discarded.
            assert [e["correlation_id"] for e in s.faults(phase="response_discarded")] in ([], [1])
    run(scenario())


def test_bandwidth_limit_paces_frames(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "bandwidth", "api": "produce", "direction": "request", "bytes_per_s": 40_000})
            client = await s.client()
            start = time.monotonic()
            for corr in range(4):
                await client.send(produce_request(9, {"t": [0]}, records_per_partition=1), corr)
            frame_size = len(client.sent[0])
            for _ in range(4):
                await client.recv_raw()
            elapsed = time.monotonic() - start
            assert elapsed >= 3 * frame_size / 40_000 * 0.9
            assert s.faults(phase="throttled")
            await client.close()
    run(scenario())


def test_probability_and_count(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "error", "api": "produce", "error": 7, "probability": 0.5, "count": 3})
            client = await s.client()
            codes = []
            for corr in range(40):
                await client.send(produce_request(9, {"t": [0]}), corr)
                codes.append(partition_errors((await client.recv(kp.PRODUCE, 9))[1])[0][2])
            assert codes.count(7) == 3 and codes.count(0) == 37
            state = s.proxy.rules()[0]
            assert state["state"] == "expired" and state["fired"] == 3 and state["matched"] > 3
            await client.close()
    run(scenario())


def test_time_window_rule(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "error", "api": "produce", "error": 7, "start_after_s": 0.2,
                              "duration_s": 0.3})
            client = await s.client()

            async def code(corr: int) -> int:
                await client.send(produce_request(9, {"t": [0]}), corr)
                return partition_errors((await client.recv(kp.PRODUCE, 9))[1])[0][2]

            assert await code(1) == 0
            await asyncio.sleep(0.25)
            assert await code(2) == 7
            await asyncio.sleep(0.35)
            assert await code(3) == 0
            assert s.sink.of("rule_expired")
            await client.close()
    run(scenario())


def test_metadata_rewrite_points_clients_at_the_proxies(run: Any) -> None:
    async def scenario() -> None:
        async with stack(n_brokers=3, api_ranges={**PLAIN_RANGES, kp.METADATA: (0, 12)}) as s:
            # no node ids given: the proxy must learn them from the brokers' own addresses
            for listener in s.proxy.listeners:
                listener.node_id = None
            client = await s.client(1)
            await client.send(metadata_request(12, None), 1)
            _, response = await client.recv(kp.METADATA, 12)
            advertised = {b.node_id: (b.host, b.port) for b in response.brokers}
            assert advertised == {b.node_id: s.proxy.listeners[i].advertised for i, b in enumerate(s.brokers)}
            assert [l.node_id for l in s.proxy.listeners] == [1, 2, 3]
            assert len(s.sink.of("broker_learned")) == 3
            assert s.sink.of("address_rewrite")[0]["detail"]["changes"][0]["new"] == s.address(0)
            assert s.proxy.topic_names == {s.cluster.topic_ids[t]: t for t in ("t", "u")}
            # rules can now target broker ids
            s.proxy.add_rule({"action": "error", "api": "produce", "error": 6, "broker": 2})
            on_1 = await s.client(0)
            on_2 = await s.client(1)
            await on_1.send(produce_request(9, {"t": [0]}), 1)
            await on_2.send(produce_request(9, {"t": [1]}), 1)
            assert partition_errors((await on_1.recv(kp.PRODUCE, 9))[1])[0][2] != 6
            assert partition_errors((await on_2.recv(kp.PRODUCE, 9))[1])[0][2] == 6
            for c in (client, on_1, on_2):
                await c.close()
    run(scenario())


def test_metadata_rewrite_sends_clients_to_peer_proxies(run: Any) -> None:
    # One proxy process per broker (an existing cluster): each fronts one broker and
    # rewrites the others to their own proxies, never to the brokers themselves.
    async def scenario() -> None:
        cluster = FakeCluster({"t": 3})
        brokers = [cluster.add_broker(i + 1, api_ranges={**PLAIN_RANGES, kp.METADATA: (0, 12)}) for i in range(3)]
        for broker in brokers:
            await broker.start()
        peers = {2: ("127.0.0.1", 19092), 3: ("127.0.0.1", 19093)}
        sink = MemoryEventSink()
        proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", brokers[0].port), broker=1)], events=sink,
                           peers=peers)
        await proxy.start()
        try:
            client = await RawClient().connect(format_hostport(*proxy.listeners[0].advertised))
            await client.send(metadata_request(12, None), 1)
            _, response = await client.recv(kp.METADATA, 12)
            assert {b.node_id: (b.host, b.port) for b in response.brokers} == {
                1: proxy.listeners[0].advertised, **peers}
            assert not sink.of("unmapped_broker")
            await client.close()
        finally:
            await proxy.stop()
            for broker in brokers:
                await broker.stop()
    run(scenario())


def test_api_versions_capped_when_rewriting(run: Any) -> None:
    async def scenario() -> None:
        ranges = {**PLAIN_RANGES, kp.PRODUCE: (3, 11), kp.FETCH: (4, 17)}
        async with stack(api_ranges=ranges) as s:
            client = await s.client()
            await client.send(api_versions_request(3), 1)
            _, response = await client.recv(kp.API_VERSIONS, 3)
            maxima = {int(e.api_key): int(e.max_version) for e in response.api_keys}
            assert maxima[kp.PRODUCE] == 9 and maxima[kp.FETCH] == 15 and maxima[kp.METADATA] == 12
            await client.close()
        async with stack(api_ranges=ranges, rewrite=False) as s:
            client = await s.client()
            await client.send(api_versions_request(3), 1)
            _, response = await client.recv(kp.API_VERSIONS, 3)
            assert {int(e.api_key): int(e.max_version) for e in response.api_keys}[kp.PRODUCE] == 11
            await client.close()
    run(scenario())


def test_api_versions_unsupported_version_passes_through(run: Any) -> None:
    async def scenario() -> None:
        ranges = {**PLAIN_RANGES, kp.API_VERSIONS: (0, 2), kp.PRODUCE: (3, 11)}
        async with stack(api_ranges=ranges) as s:
            client = await s.client()
            await client.send(api_versions_request(3), 1)
            _, response = await client.recv(kp.API_VERSIONS, 0)  # the broker answers v0 on error
            assert response.error_code == ErrorCode.unsupported_version
            await client.send(api_versions_request(2), 2)  # the client retries lower: capped as usual
            _, response = await client.recv(kp.API_VERSIONS, 2)
            assert {int(e.api_key): int(e.max_version) for e in response.api_keys}[kp.PRODUCE] == 9
            assert not s.sink.of("decode_failed") and not s.sink.of("protocol_error")
            await client.close()
    run(scenario())


def test_correlation_mismatch_closes_the_connection(run: Any) -> None:
    async def scenario() -> None:
        async def liar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readexactly(4)
            await reader.readexactly(int.from_bytes(head, "big"))
            writer.write(kp.with_length((999).to_bytes(4, "big") + b"\x00\x00"))
            await writer.drain()
            await asyncio.sleep(1)

        server = await asyncio.start_server(liar, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sink = MemoryEventSink()
        async with FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", port))], events=sink) as proxy:
            client = await RawClient().connect(proxy.bootstrap)
            await client.send(api_versions_request(3), 1)
            with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
                await client.recv_raw()
            assert "does not match" in sink.of("protocol_error")[0]["detail"]["error"]
        server.close()
    run(scenario())


def test_upstream_unreachable_closes_client(run: Any) -> None:
    async def scenario() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead_port = sock.getsockname()[1]
        sink = MemoryEventSink()
        async with FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", dead_port))], events=sink) as proxy:
            client = await RawClient().connect(proxy.bootstrap)
            with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
                await client.recv_raw()
            assert sink.of("upstream_unreachable")
    run(scenario())


def test_events_file_has_clocks_and_context(tmp_path: Any, run: Any) -> None:
    path = tmp_path / "events" / "proxy.jsonl"

    async def scenario() -> None:
        cluster = FakeCluster({"t": 1})
        broker = cluster.add_broker(1, api_ranges=PLAIN_RANGES)
        await broker.start()
        async with FaultProxy([f"1@127.0.0.1:0=127.0.0.1:{broker.port}"], events=path) as proxy:
            rid = proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1})
            client = await RawClient().connect(proxy.bootstrap)
            await client.send(produce_request(9, {"t": [0]}), 41, client_id="producer-7")
            await asyncio.sleep(0.2)
            await client.close()
        await broker.stop()
        events = read_events(path)
        kinds = [e["event"] for e in events]
        assert kinds[0] == "proxy_start" and kinds[-1] == "proxy_stop"
        fault = [e for e in events if e["event"] == "fault" and e["phase"] == "response_dropped"][0]
        before = time.monotonic_ns()
        assert 0 < fault["ts_ns"] < before and fault["wall"].endswith("Z") and fault["wall_ns"] > 1.6e18
        for key, value in {"broker": 1, "api": "produce", "api_key": 0, "api_version": 9, "correlation_id": 41,
                           "client_id": "producer-7", "rule_id": rid, "action": "lost_ack"}.items():
            assert fault[key] == value, key
        assert fault["client"].startswith("127.0.0.1:") and fault["proxy"].startswith("127.0.0.1:")
        assert fault["topics"] == [{"topic": "t", "partitions": [0], "record_counts": [1]}]
    run(scenario())


def test_rule_ids_and_control_protocol(run: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with stack() as s:
            control = ControlServer(s.proxy, f"unix:{tmp_path}/control.sock")
            await control.start()

            def drive() -> dict[str, Any]:
                client = ControlClient(control.address)
                try:
                    out: dict[str, Any] = {"pid": client.call("ping")["pid"]}
                    out["rid"] = client.add_rule({"action": "latency", "api": "produce", "ms": 5, "id": "slow"})
                    with pytest.raises(ControlError, match="already installed"):
                        client.add_rule({"action": "latency", "ms": 5, "id": "slow"})
                    with pytest.raises(ControlError, match="'action'"):
                        client.add_rule({"action": "nope"})
                    with pytest.raises(ControlError, match="unknown op"):
                        client.call("explode")
                    out["auto"] = client.add_rule({"action": "blackhole", "api": "fetch"})
                    out["rules"] = client.rules()
                    out["removed"] = client.remove_rule("slow")
                    out["removed_again"] = client.remove_rule("slow")
                    out["cleared"] = client.clear()
                    out["stats"] = client.stats()
                    return out
                finally:
                    client.close()

            out = await asyncio.to_thread(drive)
            await control.stop()
            assert out["rid"] == "slow" and out["auto"] == "r1"
            assert [r["id"] for r in out["rules"]] == ["slow", "r1"]
            assert out["rules"][0]["state"] == "active"
            assert out["removed"]["id"] == "slow" and out["removed"]["fired"] == 0
            assert out["removed_again"] is None and out["cleared"] == 1
            assert out["stats"]["rules"] == [] and out["stats"]["listeners"][0]["broker"] == 1
    run(scenario())


def test_heal_counts_firings_of_a_proxy_that_removes_rules_without_counters(run: Any, monkeypatch: Any,
                                                                          tmp_path: Path) -> None:
    """A proxy started by an older kafkaproof (a cluster kept running across an upgrade) answers
    remove_rule without the rule's counters; the heal still records its firings, not 0 (which
    would make the fault look as if it had no effect)."""
    from kafkaproof.cluster import heal
    from kafkaproof.proxy import control as control_module

    current = control_module.handle_command

    def older(proxy: Any, request: Any) -> dict[str, Any]:
        reply = current(proxy, request)
        if request.get("op") == "remove_rule":
            reply.pop("rule", None)
        return reply

    monkeypatch.setattr(control_module, "handle_command", older)

    async def scenario() -> None:
        async with stack() as s:
            rid = s.proxy.add_rule({"action": "error", "api": "produce", "error": "REQUEST_TIMED_OUT"})
            client = await s.client()
            for correlation_id in (1, 2, 3):
                await client.send(produce_request(9, {"t": [0]}), correlation_id)
                await client.recv_raw()
            control = ControlServer(s.proxy, f"unix:{tmp_path}/control.sock")
            await control.start()
            cluster = SimpleNamespace(proxy_control=lambda nid: ControlClient(control.address),
                                      proxy_state=lambda nid: "running")
            counts = await asyncio.to_thread(heal.remove_proxy_rules, cluster, [[1, rid]])
            await control.stop()
            assert counts == {"proxy_fired": 3, "proxy_matched": 3}
            assert s.proxy.rules() == []
    run(scenario())


# =========================================================================== subprocess


class _BrokerThread:
    """A fake broker on its own event loop thread, for tests that drive a subprocess synchronously."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.cluster = FakeCluster({"t": 2})
        self.broker = self.cluster.add_broker(1, api_ranges=PLAIN_RANGES)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> _BrokerThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _sync_roundtrip(address: str, request: Any, correlation_id: int, timeout: float = 3.0) -> bytes:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(kp.encode_request(request, correlation_id))
        head = _recv_exactly(sock, 4)
        return _recv_exactly(sock, int.from_bytes(head, "big"))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def test_proxy_process_end_to_end(tmp_path: Any) -> None:
    events = tmp_path / "proxy-events.jsonl"
    with _BrokerThread() as fake:
        with ProxyProcess([f"1@127.0.0.1:0=127.0.0.1:{fake.broker.port}"], events=events,
                          log_file=tmp_path / "proxy.log", seed=1) as proxy:
            assert proxy.listeners[0]["broker"] == 1
            frame = _sync_roundtrip(proxy.bootstrap, produce_request(9, {"t": [1]}), 7)
            assert partition_errors(kp.decode_response(frame, kp.PRODUCE, 9)) == [("t", 1, 0)]
            rid = proxy.add_rule({"action": "error", "api": "produce", "error": "REQUEST_TIMED_OUT"})
            frame = _sync_roundtrip(proxy.bootstrap, produce_request(9, {"t": [1]}), 8)
            assert partition_errors(kp.decode_response(frame, kp.PRODUCE, 9)) == [("t", 1, 7)]
            stats = proxy.stats()
            assert stats["listeners"][0]["requests"] == 2 and stats["rules"][0]["fired"] == 1
            assert proxy.remove_rule(rid)
            pid = proxy.pid
        assert proxy.proc is not None and proxy.proc.returncode == 0
        with pytest.raises(ProcessLookupError):
            import os
            os.kill(pid, 0)
    kinds = [e["event"] for e in read_events(events)]
    assert kinds[0] == "proxy_start" and "rule_added" in kinds and kinds[-1] == "proxy_stop"
    assert "listening on" in (tmp_path / "proxy.log").read_text()


def test_proxy_process_does_not_outlive_its_owner(tmp_path: Any) -> None:
    import os
    import subprocess

    owner = (
        "import os, sys\n"
        "from kafkaproof.proxy import ProxyProcess\n"
        "p = ProxyProcess(['127.0.0.1:0=127.0.0.1:9'], log_file=sys.argv[1]).start()\n"
        "print(p.pid, flush=True)\n"
        "os._exit(0)\n"  # dies without stopping the proxy
    )
    out = subprocess.run([sys.executable, "-c", owner, str(tmp_path / "orphan.log")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.path.join(_repo_root(), "plugins")}, timeout=30, check=True)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the proxy outlived the process that started it"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_proxy_process_reports_startup_failure(tmp_path: Any) -> None:
    with pytest.raises(ProxyError, match="exited with code"):
        with ProxyProcess(["not-a-route"], log_file=tmp_path / "bad.log"):
            pass
    # an unparsable --rule is refused at start
    with pytest.raises(ProxyError):
        with ProxyProcess(["127.0.0.1:0=127.0.0.1:1"], rules=[{"action": "nope"}], log_file=tmp_path / "bad2.log"):
            pass


def test_cli_help_runs() -> None:
    import subprocess

    out = subprocess.run([sys.executable, "-m", "kafkaproof.proxy", "--help"], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": "plugins"}, cwd=_repo_root(), check=True)
    assert "--listen" in out.stdout and "--control" in out.stdout


def _repo_root() -> str:
    return str(REPO)


def test_json_safe_events(run: Any) -> None:
    async def scenario() -> None:
        async with stack(api_ranges={**PLAIN_RANGES, kp.PRODUCE: (3, 13)}) as s:
            s.proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1})
            client = await s.client()
            await client.send(metadata_request(12, None), 0)  # teaches the proxy the topic ids
            await client.recv_raw()
            await client.send(produce_request(13, {"t": [0]}, topic_ids=s.cluster.topic_ids), 1)
            await asyncio.sleep(0.2)
            assert s.faults(phase="response_dropped")[0]["topics"] == [
                {"topic": "t", "partitions": [0], "topic_id": str(s.cluster.topic_ids["t"]), "record_counts": [1]}]
            await client.close()
            for event in s.sink.events:
                json.dumps(event)
    run(scenario())
