"""The proxy rules that alter answers: `metadata` (missing or stale leaders), `corrupt` and `duplicate` (Fetch
record batches). Real responses encoded with kio at every version, altered, decoded again; then the rules through
the proxy in front of the fake broker."""
from __future__ import annotations

import asyncio
import dataclasses
import struct
import sys
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from kafkaproof.proxy import FaultProxy, MemoryEventSink, Route, RuleError, parse_rule
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy import records as rb
from kafkaproof.proxy.fake_broker import FakeCluster, RawClient, crc32c, make_record_batch
from kafkaproof.proxy.responses import alter_batches, hide_leader_hints, misstate_leaders

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

TOPIC_ID = uuid.UUID(int=4242)


def metadata_response(version: int, replicas: tuple[int, ...] = (2, 3, 1)) -> Any:
    """Brokers 1-3; topic t with partitions 0 and 1 led by broker 2 (epoch 7), partition 2 leaderless."""
    cls = kp.response_type(kp.METADATA, version)
    mod = sys.modules[cls.__module__]
    brokers = tuple(kp.make_entity(mod.MetadataResponseBroker, node_id=i32(n), host=f"b{n}", port=i32(9092), rack=None)
                    for n in (1, 2, 3))
    parts = tuple(kp.make_entity(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=i32(p),
                                 leader_id=i32(leader), leader_epoch=i32(7), replica_nodes=tuple(i32(r) for r in replicas),
                                 isr_nodes=tuple(i32(r) for r in replicas), offline_replicas=())
                  for p, leader in ((0, 2), (1, 2), (2, -1)))
    topic = kp.make_entity(mod.MetadataResponseTopic, error_code=ErrorCode.none, name="t", topic_id=TOPIC_ID,
                           is_internal=False, partitions=parts)
    return kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, brokers=brokers, cluster_id="c", controller_id=i32(1),
                          topics=(topic,), error_code=ErrorCode.none)


def only_partition(wanted: int):
    return lambda topic, topic_id, partition: partition == wanted


def roundtrip(payload: Any, api_key: int, version: int) -> Any:
    return kp.decode_response(kp.encode_response(payload, 11)[4:], api_key, version)


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("mode", ["missing", "stale"])
def test_metadata_leaders_misstated_at_every_version(version: int, mode: str) -> None:
    payload = roundtrip(metadata_response(version), kp.METADATA, version)
    altered, changes = misstate_leaders(payload, mode, only_partition(0))
    out = roundtrip(altered, kp.METADATA, version)
    p0, p1, p2 = out.topics[0].partitions
    want = (-1, ErrorCode.leader_not_available) if mode == "missing" else (3, ErrorCode.none)
    assert (int(p0.leader_id), p0.error_code) == want
    assert [c.as_json() for c in changes] == [{"topic": "t", "partition": 0, "old_leader": 2, "new_leader": want[0],
                                               "error_code": int(want[1])}]
    assert p1 == payload.topics[0].partitions[1] and p2 == payload.topics[0].partitions[2]
    assert p0.replica_nodes == payload.topics[0].partitions[0].replica_nodes
    if version >= 7:
        assert int(p0.leader_epoch) == 7  # never newer than the truth, so the true answer is believed after the heal
    assert out.brokers == payload.brokers


def test_stale_leader_is_another_replica_else_another_broker_and_leaderless_partitions_stay() -> None:
    payload = metadata_response(12, replicas=(2,))
    altered, changes = misstate_leaders(payload, "stale", lambda *_: True)
    assert [(c.partition, c.new_leader) for c in changes] == [(0, 1), (1, 1)]  # one replica: the first other broker
    untouched, none = misstate_leaders(payload, "missing", only_partition(2))
    assert untouched is payload and none == []
    with pytest.raises(ValueError, match="missing, stale"):
        misstate_leaders(payload, "gone", lambda *_: True)


def fetch_response(version: int, records: dict[int, bytes]) -> Any:
    cls = kp.response_type(kp.FETCH, version)
    mod = sys.modules[cls.__module__]
    parts = tuple(kp.make_entity(mod.PartitionData, partition_index=i32(p), error_code=ErrorCode.none,
                                 high_watermark=i64(100), last_stable_offset=i64(100), log_start_offset=i64(0),
                                 aborted_transactions=(), preferred_read_replica=i32(-1), records=data)
                  for p, data in records.items())
    ident = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "t"}
    topic = kp.make_entity(mod.FetchableTopicResponse, **ident, partitions=parts)
    return kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0),
                          responses=(topic,), node_endpoints=())


def crc_ok(batch: bytes) -> bool:
    return struct.unpack_from(">I", batch, 17)[0] == crc32c(batch[21:])


def values_of(records: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of a record set, read the way a client does."""
    batches, _ = rb.split_batches(records)
    out = []
    for b in batches:
        data = records[b.start:b.end]
        spans = rb.value_spans(data)
        out += [(b.base_offset + i, data[s:e]) for i, (s, e) in enumerate(spans)]
    return out


VALUES = [b"kp|run|1|xxxx", b"kp|run|2|xxxx"]


@pytest.mark.parametrize("version", range(4, 19))
def test_corrupt_flips_the_first_byte_of_each_value_at_every_fetch_version(version: int) -> None:
    first, second = make_record_batch(VALUES, 10), make_record_batch([b"kp|run|3|x"], 12)
    other = make_record_batch([b"kp|run|9|x"], 40)
    payload = roundtrip(fetch_response(version, {0: first + second, 1: other}), kp.FETCH, version)
    picks = iter([True, False])  # the first batch of partition 0 only
    altered, changes = alter_batches(payload, "corrupt", lambda t, tid, p: t == "t" and p == 0 and next(picks),
                                     {TOPIC_ID: "t"})
    out = roundtrip(altered, kp.FETCH, version)
    p0, p1 = out.responses[0].partitions
    assert values_of(p0.records) == [(10, b"\x94p|run|1|xxxx"), (11, b"\x94p|run|2|xxxx"), (12, b"kp|run|3|x")]
    assert p1.records == other
    batches, _ = rb.split_batches(p0.records)
    assert not crc_ok(p0.records[:batches[0].end]) and crc_ok(p0.records[batches[1].start:])
    assert [c.as_json() for c in changes] == [{"topic": "t", "partition": 0,
                                               "base_offset": 10, "records": 2, "values_corrupted": 2}]


@pytest.mark.parametrize("version", range(4, 19))
def test_duplicate_appends_a_copy_after_the_last_batch_at_every_fetch_version(version: int) -> None:
    first, second = make_record_batch(VALUES, 10), make_record_batch([b"kp|run|3|x"], 12)
    torn = make_record_batch([b"kp|run|4|x"], 13)[:30]  # cut short by the fetch size limit
    payload = roundtrip(fetch_response(version, {0: first + second + torn}), kp.FETCH, version)
    altered, changes = alter_batches(payload, "duplicate", lambda t, tid, p: True)
    records = roundtrip(altered, kp.FETCH, version).responses[0].partitions[0].records
    assert values_of(records) == [(10, VALUES[0]), (11, VALUES[1]), (12, b"kp|run|3|x"),
                                  (13, VALUES[0]), (14, VALUES[1]), (15, b"kp|run|3|x")]
    batches, end = rb.split_batches(records)
    assert end == len(records) and all(crc_ok(records[b.start:b.end]) for b in batches)
    assert [(c.base_offset, c.copy_offset, c.records) for c in changes] == [(10, 13, 2), (12, 15, 1)]


def test_compressed_and_control_batches() -> None:
    gzip_batch = make_record_batch(VALUES, 0, attributes=1)
    marker = make_record_batch([b"\x00\x00\x00\x00"], 2, attributes=0x30)
    payload = fetch_response(12, {0: gzip_batch + marker})
    unchanged, corrupted = alter_batches(payload, "corrupt", lambda *_: True)
    assert corrupted == [] and unchanged is payload
    _, duplicated = alter_batches(payload, "duplicate", lambda *_: True)
    assert [(c.base_offset, c.copy_offset) for c in duplicated] == [(0, 3)]  # the compressed batch, not the marker


def test_rules_that_alter_answers_parse_and_refuse_with_the_field() -> None:
    rule = parse_rule({"action": "metadata", "mode": "stale", "topic": "t", "partitions": [0], "count": 2})
    assert rule.api == frozenset({kp.METADATA}) and rule.alters_response and not rule.needs_targets
    assert parse_rule(rule.as_json()) == rule
    assert parse_rule({"action": "duplicate", "api": "Fetch", "every": 3}).api == frozenset({kp.FETCH})
    assert rule.matches_partition("t", None, 0) and not rule.matches_partition("u", None, 0)
    for spec, fragment in [({"action": "metadata"}, "'mode'.*missing, stale"),
                           ({"action": "metadata", "mode": "late"}, "'mode'"),
                           ({"action": "corrupt", "api": "produce"}, "'api'.*fetch answers only"),
                           ({"action": "duplicate", "mode": "stale"}, "unknown field")]:
        with pytest.raises(RuleError, match=fragment):
            parse_rule(spec)


# --------------------------------------------------------------------------- through the proxy


def metadata_request(version: int, topics: list[str]) -> Any:
    cls = kp.request_type(kp.METADATA, version)
    mod = sys.modules[cls.__module__]
    return kp.make_entity(cls, topics=tuple(kp.make_entity(mod.MetadataRequestTopic, name=t, topic_id=None)
                                            for t in topics),
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def fetch_request(version: int, topic: str, partition: int) -> Any:
    import datetime

    from kio.static.primitive import i32Timedelta

    cls = kp.request_type(kp.FETCH, version)
    mod = sys.modules[cls.__module__]
    part = kp.make_entity(mod.FetchPartition, partition=i32(partition), fetch_offset=i64(0),
                          partition_max_bytes=i32(1 << 20), log_start_offset=i64(-1), current_leader_epoch=i32(-1))
    return kp.make_entity(cls, replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
                          min_bytes=i32(1), max_bytes=i32(1 << 24), forgotten_topics_data=(), rack_id="",
                          session_id=i32(0), session_epoch=i32(-1),
                          topics=(kp.make_entity(mod.FetchTopic, topic=topic, partitions=(part,)),))


async def _proxied(cluster: FakeCluster, sink: MemoryEventSink) -> tuple[list, FaultProxy]:
    brokers = [cluster.add_broker(n) for n in (1, 2)]
    for broker in brokers:
        await broker.start()
    proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", b.port), broker=b.node_id) for b in brokers],
                       events=sink, rewrite=False, seed=3)
    await proxy.start()
    return brokers, proxy


def test_metadata_rule_through_the_proxy_fires_per_answer_and_stops_at_the_heal() -> None:
    async def scenario() -> None:
        cluster, sink = FakeCluster({"t": 2}), MemoryEventSink()
        brokers, proxy = await _proxied(cluster, sink)
        try:
            client = await RawClient().connect(f"127.0.0.1:{proxy.listeners[0].bound[1]}")
            rule_id = proxy.add_rule({"action": "metadata", "mode": "missing", "partitions": [1], "count": 2})
            leaders = []
            for corr in range(1, 5):
                if corr == 4:
                    proxy.remove_rule(rule_id)
                await client.send(metadata_request(12, ["t"]), corr)
                _, response = await client.recv(kp.METADATA, 12)
                leaders.append([int(p.leader_id) for p in response.topics[0].partitions])
                if corr == 3:
                    assert proxy.rules()[0]["fired"] == 2 and proxy.rules()[0]["state"] == "expired"
            assert leaders == [[1, -1], [1, -1], [1, 2], [1, 2]]
            events = sink.of("fault", phase="metadata_misstated")
            assert len(events) == 2 and events[0]["topics"] == [{"topic": "t", "partitions": [1]}]
            assert events[0]["detail"]["changes"][0]["error_code"] == int(ErrorCode.leader_not_available)
            await client.close()
        finally:
            await proxy.stop()
            for broker in brokers:
                await broker.stop()
    asyncio.run(scenario())


@pytest.mark.parametrize("action", ["corrupt", "duplicate"])
def test_fetch_rules_through_the_proxy_count_the_batches_they_alter(action: str) -> None:
    async def scenario() -> None:
        cluster, sink = FakeCluster({"t": 1}), MemoryEventSink()
        brokers, proxy = await _proxied(cluster, sink)
        try:
            for values in (VALUES, [b"kp|run|3|x"]):
                cluster.append("t", 0, make_record_batch(values), 1, "test")
            client = await RawClient().connect(f"127.0.0.1:{proxy.listeners[0].bound[1]}")
            proxy.add_rule({"action": action, "topic": "t", "count": 1})
            await client.send(fetch_request(12, "t", 0), 1)
            _, response = await client.recv(kp.FETCH, 12)
            got = values_of(response.responses[0].partitions[0].records)
            if action == "corrupt":
                assert got == [(0, b"\x94p|run|1|xxxx"), (1, b"\x94p|run|2|xxxx"), (2, b"kp|run|3|x")]
            else:
                assert got == [(0, VALUES[0]), (1, VALUES[1]), (2, b"kp|run|3|x"), (3, VALUES[0]), (4, VALUES[1])]
            await client.send(fetch_request(12, "t", 0), 2)  # the count is used up: the truth again
            _, again = await client.recv(kp.FETCH, 12)
            assert values_of(again.responses[0].partitions[0].records) == [(0, VALUES[0]), (1, VALUES[1]),
                                                                             (2, b"kp|run|3|x")]
            assert proxy.rules()[0]["fired"] == 1
            (event,) = sink.of("fault", action=action)
            assert event["phase"] == ("records_corrupted" if action == "corrupt" else "batch_duplicated")
            assert event["detail"]["batches"][0]["base_offset"] == 0
            await client.close()
        finally:
            await proxy.stop()
            for broker in brokers:
                await broker.stop()
    asyncio.run(scenario())


def _error_answer_with_hint(api_key: int, version: int) -> Any:
    """A Produce or Fetch answer refusing partitions 0 and 1 of t with NOT_LEADER_OR_FOLLOWER, hinting broker 3."""
    response = kp.build_error_response(api_key, version, [kp.TopicPartitions("t", (0, 1), TOPIC_ID)],
                                       ErrorCode.not_leader_or_follower)
    mod = sys.modules[type(response).__module__]
    hint = mod.LeaderIdAndEpoch(leader_id=i32(3), leader_epoch=i32(7))
    field = "partition_responses" if api_key == kp.PRODUCE else "partitions"
    topic = response.responses[0]
    parts = tuple(dataclasses.replace(p, current_leader=hint) for p in getattr(topic, field))
    return dataclasses.replace(response, responses=(dataclasses.replace(topic, **{field: parts}),))


@pytest.mark.parametrize("api_key,version", [(kp.PRODUCE, v) for v in range(10, 14)] + [(kp.FETCH, v) for v in range(12, 19)])
def test_stale_rules_hide_the_leader_hints_of_error_answers(api_key: int, version: int) -> None:
    payload = roundtrip(_error_answer_with_hint(api_key, version), api_key, version)
    altered, hidden = hide_leader_hints(payload, lambda t, tid, p: t == "t" and p == 1, {TOPIC_ID: "t"})
    out = roundtrip(altered, api_key, version)
    parts = out.responses[0].partition_responses if api_key == kp.PRODUCE else out.responses[0].partitions
    assert [(int(p.current_leader.leader_id), int(p.current_leader.leader_epoch)) for p in parts] == [(3, 7), (-1, -1)]
    assert [h.as_json() for h in hidden] == [{"topic": "t", "partition": 1, "leader": 3,
                                              "error_code": int(ErrorCode.not_leader_or_follower)}]
    assert parse_rule({"action": "metadata", "mode": "stale"}).matches_header(None, "p", api_key, None)
    assert not parse_rule({"action": "metadata", "mode": "missing"}).matches_header(None, "p", api_key, None)
