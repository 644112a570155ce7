"""The proxy on share-group APIs (issue 46): error answers of ShareFetch, ShareAcknowledge and ShareGroupHeartbeat
at every version kio has, the rules that select them, lost answers, and the ApiVersions caps."""
from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from kafkaproof.proxy import FaultProxy, MemoryEventSink, Route, RuleError, parse_rule
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy.fake_broker import FakeCluster, RawClient
from kafkaproof.proxy.server import KIO_CAPS
from kafkaproof.proxy.share_answers import SESSION_ERRORS

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

TOPIC_ID = uuid.UUID(int=42)
SHARE_VERSIONS = [(api, v) for api in (kp.SHARE_FETCH, kp.SHARE_ACKNOWLEDGE) for v in (1, 2)]


def _batch(mod: Any, first: int, last: int, ack_type: int = 1) -> Any:
    return mod.AcknowledgementBatch(first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(ack_type),))


def share_request(api: int, version: int, partitions: dict[int, bool], topic_id: uuid.UUID = TOPIC_ID) -> Any:
    """A ShareFetch or ShareAcknowledge request naming `partitions` (partition -> carries acknowledgements)."""
    cls = kp.request_type(api, version)
    mod = sys.modules[cls.__module__]
    if api == kp.SHARE_FETCH:
        parts = tuple(mod.FetchPartition(partition_index=i32(p), acknowledgement_batches=(_batch(mod, 0, 4),) if acked
                                         else ()) for p, acked in partitions.items())
        topics = (mod.FetchTopic(topic_id=topic_id, partitions=parts),) if parts else ()
        return kp.make_entity(cls, group_id="g", member_id="m", share_session_epoch=i32(1),
                              max_wait=kp.ZERO_THROTTLE, min_bytes=i32(1), max_records=i32(500),
                              batch_size=i32(500), topics=topics, forgotten_topics_data=())
    parts = tuple(mod.AcknowledgePartition(partition_index=i32(p), acknowledgement_batches=(_batch(mod, 0, 4),))
                  for p in partitions)
    return kp.make_entity(cls, group_id="g", member_id="m", share_session_epoch=i32(2),
                          topics=(mod.AcknowledgeTopic(topic_id=topic_id, partitions=parts),))


def _roundtrip_request(payload: Any) -> Any:
    frame = kp.encode_request(payload, 5)[4:]
    return kp.decode_request(frame, kp.parse_request_header(frame))


def _partition_errors(response: Any) -> list[tuple[int, int, int | None]]:
    return [(int(p.partition_index), int(p.error_code),
             None if not hasattr(p, "acknowledge_error_code") else int(p.acknowledge_error_code))
            for t in response.responses for p in t.partitions]


@pytest.mark.parametrize("api, version", SHARE_VERSIONS)
def test_an_error_lands_on_every_partition_and_on_the_acknowledgements_it_answers(api: int, version: int) -> None:
    request = _roundtrip_request(share_request(api, version, {0: True, 2: False}))
    targets = kp.request_targets(request, {TOPIC_ID: "orders"})
    assert [(t.topic, t.partitions, t.topic_id) for t in targets] == [("orders", (0, 2), TOPIC_ID)]
    data = kp.encode_error_response(api, version, targets, ErrorCode.not_leader_or_follower, 5, request)
    response = kp.decode_response(data[4:], api, version)
    assert kp.response_correlation_id(data[4:]) == 5 and response.error_code == ErrorCode.none
    assert [t.topic_id for t in response.responses] == [TOPIC_ID]
    if api == kp.SHARE_FETCH:  # the fetch error everywhere, the acknowledgement error where it carried some
        assert _partition_errors(response) == [(0, 6, 6), (2, 6, 0)]
        assert all(p.current_leader.leader_id == -1 and not p.acquired_records
                   for t in response.responses for p in t.partitions)
    else:
        assert _partition_errors(response) == [(0, 6, None), (2, 6, None)]


@pytest.mark.parametrize("api, version", SHARE_VERSIONS)
def test_session_errors_and_requests_naming_nothing_get_the_top_level_error(api: int, version: int) -> None:
    request = _roundtrip_request(share_request(api, version, {1: True}))
    targets = kp.request_targets(request, {})
    for code in sorted(SESSION_ERRORS, key=int):
        response = kp.build_error_response(api, version, targets, code, request)
        assert response.error_code == code and response.responses == ()
    if api == kp.SHARE_FETCH:  # an incremental fetch with nothing new names no partition
        empty = _roundtrip_request(share_request(api, version, {}))
        response = kp.build_error_response(api, version, kp.request_targets(empty, {}), "UNKNOWN_SERVER_ERROR", empty)
        assert int(response.error_code) == -1 and response.responses == ()


def test_heartbeat_error_is_its_top_level_error() -> None:
    response = kp.build_error_response(kp.SHARE_GROUP_HEARTBEAT, 1, (), "UNKNOWN_MEMBER_ID")
    decoded = kp.decode_response(kp.encode_response(response, 3)[4:], kp.SHARE_GROUP_HEARTBEAT, 1)
    assert decoded.error_code == ErrorCode.unknown_member_id and decoded.assignment is None


def test_rules_select_the_share_apis_by_name_and_by_topic() -> None:
    for api in ("share_fetch", "ShareAcknowledge", "share_group_heartbeat"):
        assert parse_rule({"action": "error", "api": api, "error": "NOT_LEADER_OR_FOLLOWER"}).api
    rule = parse_rule({"action": "lost_ack", "api": ["share_acknowledge", "share_fetch"], "topic": "orders",
                       "partitions": [0]})
    targets = [kp.TopicPartitions("orders", (0, 1), TOPIC_ID)]
    assert rule.matches_targets(targets) and not rule.matches_targets([kp.TopicPartitions("orders", (1,), TOPIC_ID)])
    with pytest.raises(RuleError, match="need 'api' limited to fetch, produce, share_acknowledge, share_fetch"):
        parse_rule({"action": "lost_ack", "api": "share_group_heartbeat", "topic": "orders"})
    assert (KIO_CAPS[kp.SHARE_FETCH], KIO_CAPS[kp.SHARE_ACKNOWLEDGE], KIO_CAPS[kp.SHARE_GROUP_HEARTBEAT]) == (2, 2, 1)


async def _through_proxy(rules: list[dict], requests: list[Any]) -> tuple[list[Any], MemoryEventSink, FakeCluster]:
    """Send `requests` (after a Metadata v12, which teaches the proxy the topic's id) through a proxy with `rules`
    in front of a fake broker; the answers the client got (None: none within 1 s)."""
    cluster = FakeCluster({"orders": 3})
    broker = cluster.add_broker(1, api_ranges={kp.API_VERSIONS: (0, 4), kp.METADATA: (0, 12),
                                               kp.SHARE_ACKNOWLEDGE: (1, 2)})
    await broker.start()
    sink = MemoryEventSink()
    proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", broker.port), broker=1)], events=sink, rewrite=False,
                       seed=1)
    await proxy.start()
    answers: list[Any] = []
    try:
        for rule in rules:
            proxy.add_rule(rule)
        host, port = proxy.listeners[0].advertised
        client = await RawClient().connect(f"{host}:{port}")
        mcls = kp.request_type(kp.METADATA, 12)
        await client.send(kp.make_entity(mcls, topics=None, allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False), 1)
        await client.recv(kp.METADATA, 12)
        for i, request in enumerate(requests):
            await client.send(request, 10 + i)
            try:
                answers.append((await client.recv(request.__api_key__, request.__version__, timeout=1.0))[1])
            except asyncio.TimeoutError:
                answers.append(None)
        await client.close()
    finally:
        await proxy.stop()
        await broker.stop()
    return answers, sink, cluster


def test_share_acknowledge_errors_and_lost_answers_through_the_proxy() -> None:
    """An error rule on one partition answers it without forwarding; a lost answer forwards (the broker takes the
    acknowledgements) and drops the answer, which the client never gets."""
    topic_id = FakeCluster({"orders": 3}).topic_ids["orders"]
    rules = [{"action": "error", "api": "share_acknowledge", "topic": "orders", "partitions": [0],
              "error": "INVALID_RECORD_STATE", "count": 1},
             {"action": "lost_ack", "api": "share_acknowledge", "topic": "orders", "partitions": [1], "count": 1}]
    requests = [share_request(kp.SHARE_ACKNOWLEDGE, 2, {0: True}, topic_id),
                share_request(kp.SHARE_ACKNOWLEDGE, 2, {2: True}, topic_id),
                share_request(kp.SHARE_ACKNOWLEDGE, 1, {1: True}, topic_id)]
    answers, sink, cluster = asyncio.run(_through_proxy(rules, requests))
    assert _partition_errors(answers[0]) == [(0, 121, None)]  # made up by the proxy
    assert _partition_errors(answers[1]) == [(2, 0, None)]     # the broker's
    assert answers[2] is None and cluster.share_acknowledged == 2  # forwarded, taken, its answer lost
    phases = [(e["api"], e["phase"], e["topics"]) for e in sink.of("fault")]
    assert phases == [
        ("share_acknowledge", "answered_without_forwarding", [{"topic": "orders", "partitions": [0],
                                                               "topic_id": str(topic_id)}]),
        ("share_acknowledge", "request_forwarded", [{"topic": "orders", "partitions": [1], "topic_id": str(topic_id)}]),
        ("share_acknowledge", "response_dropped", [{"topic": "orders", "partitions": [1], "topic_id": str(topic_id)}])]
