"""The proxy's delivery log (proxy/deliveries.py): the records Fetch answers hand a client, read from real
Fetch responses encoded with kio at every version; the fetch offset (and KIP-227 fetch sessions); compressed
batches kept unread; the bounds; and the control ops through the proxy in front of the fake broker."""
from __future__ import annotations

import asyncio
import datetime
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from kafkaproof.proxy import ControlClient, ControlError, ControlServer, FaultProxy, MemoryEventSink, Route
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy.control import handle_command
from kafkaproof.proxy.deliveries import (Delivered, DeliveryLog, FetchDeliveries, FetchSession, Unread,
                                         fetch_deliveries, is_consumer_fetch, unb64)
from kafkaproof.proxy.errors import ProxyError
from kafkaproof.proxy.fake_broker import FakeCluster, RawClient, make_record_batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

TOPIC_ID = uuid.UUID(int=4242)
NAMES = {TOPIC_ID: "t"}
GZIP, CONTROL = 1, 0x20


def fetch_response(version: int, partitions: dict[int, bytes], errors: dict[int, int] | None = None) -> Any:
    cls = kp.response_type(kp.FETCH, version)
    mod = sys.modules[cls.__module__]
    parts = tuple(kp.make_entity(mod.PartitionData, partition_index=i32(p),
                                 error_code=ErrorCode((errors or {}).get(p, 0)),
                                 high_watermark=i64(100), last_stable_offset=i64(100), log_start_offset=i64(0),
                                 aborted_transactions=(), preferred_read_replica=i32(-1), records=data)
                  for p, data in partitions.items())
    ident = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "t"}
    topic = kp.make_entity(mod.FetchableTopicResponse, **ident, partitions=parts)
    payload = kp.make_entity(cls, throttle_time=kp.ZERO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0),
                             responses=(topic,), node_endpoints=())
    return kp.decode_response(kp.encode_response(payload, 7)[4:], kp.FETCH, version)  # real bytes, read back


def fetch_request(version: int, offsets: dict[int, int], epoch: int = -1, forgotten: tuple[int, ...] = (),
                  replica: int = -1) -> Any:
    cls = kp.request_type(kp.FETCH, version)
    mod = sys.modules[cls.__module__]
    ident = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "t"}
    parts = tuple(kp.make_entity(mod.FetchPartition, partition=i32(p), fetch_offset=i64(o),
                                 partition_max_bytes=i32(1 << 20), log_start_offset=i64(-1),
                                 current_leader_epoch=i32(-1), last_fetched_epoch=i32(-1))
                  for p, o in offsets.items())
    fields: dict[str, Any] = {}
    if version >= 15:
        fields["replica_state"] = kp.make_entity(mod.ReplicaState, replica_id=i32(replica), replica_epoch=i64(-1))
    else:
        fields["replica_id"] = i32(replica)
    forgot = (kp.make_entity(mod.ForgottenTopic, **ident, partitions=tuple(i32(p) for p in forgotten)),) \
        if forgotten else ()
    payload = kp.make_entity(cls, max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)),
                             min_bytes=i32(1), max_bytes=i32(1 << 24), forgotten_topics_data=forgot, rack_id="",
                             session_id=i32(5), session_epoch=i32(epoch),
                             topics=(kp.make_entity(mod.FetchTopic, **ident, partitions=parts),), **fields)
    frame = kp.encode_request(payload, 3)[4:]
    return kp.decode_request(frame, kp.parse_request_header(frame))


@pytest.mark.parametrize("version", range(4, kp.max_supported_version(kp.FETCH) + 1))
def test_a_fetch_answer_hands_over_the_records_from_the_fetch_offset_at_every_version(version: int) -> None:
    first = make_record_batch([b'{"id": "a"}', b'{"id": "b"}', b'{"id": "c"}'], base_offset=10, key=b"k",
                              headers=[("event-id", b"h1"), ("empty", None)], base_timestamp=1_700_000_000_000)
    second = make_record_batch([None], base_offset=13)
    packed = make_record_batch([b"zz", b"zz"], base_offset=14, attributes=GZIP)  # compressed: not read
    marker = make_record_batch([b"\x00\x00\x00\x00\x00\x00"], base_offset=16, attributes=CONTROL)
    torn = make_record_batch([b'{"id": "d"}'], base_offset=17)[:40]  # cut short by the size limit
    other = make_record_batch([b"p1"], base_offset=0)
    payload = fetch_response(version, {0: first + second + packed + marker + torn, 1: other, 2: other}, {2: 6})
    found = fetch_deliveries(payload, {("t" if version < 13 else str(TOPIC_ID), 0): 11}, NAMES)
    assert [(r.topic, r.partition, r.offset, r.value) for r in found.records] == [
        ("t", 0, 11, b'{"id": "b"}'), ("t", 0, 12, b'{"id": "c"}'), ("t", 0, 13, None), ("t", 1, 0, b"p1")]
    b = found.records[0]
    assert b.key == b"k" and b.headers == (("event-id", b"h1"), ("empty", None))
    assert b.timestamp_ms == 1_700_000_000_000
    assert found.below_fetch_offset == 1  # offset 10: before the fetch offset, the client drops it
    assert found.unread == [Unread("t", 0, 14, 15, "gzip")]  # partition 2's error: nothing handed over


def test_batches_wholly_below_the_fetch_offset_and_other_topics_are_skipped() -> None:
    data = make_record_batch([b"x", b"y"], base_offset=0) + make_record_batch([b"z"], base_offset=2)
    payload = fetch_response(12, {0: data})
    found = fetch_deliveries(payload, {("t", 0): 2}, NAMES)
    assert [r.offset for r in found.records] == [2] and found.below_fetch_offset == 2
    assert fetch_deliveries(payload, {("t", 0): 0}, NAMES, topics=frozenset({"orders"})).records == []
    legacy = b"\x00" * 16 + b"\x01" + b"\x00" * 60  # magic 1: a legacy message set, not read
    assert fetch_deliveries(fetch_response(12, {0: legacy}), {}, NAMES).unread == [Unread("t", 0, 0, -1, "legacy")]


@pytest.mark.parametrize("version", [12, 13, 17])
def test_the_fetch_session_keeps_the_offsets_an_incremental_request_leaves_out(version: int) -> None:
    session = FetchSession()
    key = "t" if version < 13 else str(TOPIC_ID)
    assert session.update(fetch_request(version, {0: 5, 1: 7}, epoch=0), NAMES) == {(key, 0): 5, (key, 1): 7}
    # incremental: only partition 0 moved; 1 keeps its offset
    assert session.update(fetch_request(version, {0: 9}, epoch=1), NAMES) == {(key, 0): 9, (key, 1): 7}
    assert session.update(fetch_request(version, {0: 9}, epoch=2, forgotten=(1,)), NAMES) == {(key, 0): 9}
    # a full fetch starts anew
    assert session.update(fetch_request(version, {1: 3}, epoch=-1), NAMES) == {(key, 1): 3}
    assert is_consumer_fetch(fetch_request(version, {0: 0})) and not is_consumer_fetch(fetch_request(version, {0: 0},
                                                                                                        replica=2))


def found(n: int, size: int = 1) -> FetchDeliveries:
    return FetchDeliveries([Delivered("t", 0, i, 0, None, b"v" * size, ()) for i in range(n)],
                           [Unread("t", 0, 100, 101, "zstd")])


def test_the_log_is_bounded_and_says_it_was_truncated() -> None:
    log = DeliveryLog(limit=3)
    log.add(1, "app", 2, found(2), at_ms=5)
    log.add(1, "app", 2, found(2), at_ms=6)
    summary = log.summary()
    assert (summary["kept"], summary["handed"], summary["dropped"], summary["truncated"]) == (3, 4, 1, True)
    assert summary["unread_batches"] == 2 and summary["answers"] == 2
    page = log.page(0, 2)
    assert page["next"] == 2 and len(page["records"]) == 2 and len(page["unread"]) == 2
    assert page["records"][0] == {"at_ms": 5, "conn": 1, "client_id": "app", "broker": 2, "topic": "t",
                                  "partition": 0, "offset": 0, "timestamp_ms": 0, "key": None, "value": "dg==",
                                  "headers": []}
    assert unb64(page["records"][0]["value"]) == b"v"
    last = log.page(2, 2)
    assert last["next"] is None and len(last["records"]) == 1 and last["unread"] == []
    by_bytes = DeliveryLog(max_bytes=10)
    by_bytes.add(1, None, None, found(3, size=4))
    assert by_bytes.summary()["kept"] == 2 and by_bytes.summary()["truncated"]
    assert log.stop() and not log.stop()
    log.add(1, "app", 2, found(1))  # stopped: nothing more
    assert log.summary()["handed"] == 4 and not DeliveryLog().summary()["truncated"]


@pytest.mark.parametrize("fields, fragment", [({"limit": 0}, "'limit'"), ({"limit": "9"}, "'limit'"),
                                              ({"max_bytes": True}, "'max_bytes'"), ({"topics": "t"}, "'topics'")])
def test_bad_log_settings_are_refused_naming_the_field(fields: dict, fragment: str) -> None:
    with pytest.raises(ProxyError, match=fragment):
        DeliveryLog(**fields)


async def _fetch(client: RawClient, offset: int, correlation_id: int) -> Any:
    await client.send(_plain_fetch(offset), correlation_id, client_id="signup-processor")
    return (await client.recv(kp.FETCH, 12))[1]


def _plain_fetch(offset: int) -> Any:
    cls = kp.request_type(kp.FETCH, 12)
    mod = sys.modules[cls.__module__]
    part = kp.make_entity(mod.FetchPartition, partition=i32(0), fetch_offset=i64(offset),
                          partition_max_bytes=i32(1 << 20), log_start_offset=i64(-1), current_leader_epoch=i32(-1))
    return kp.make_entity(cls, replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=50)),
                          min_bytes=i32(1), max_bytes=i32(1 << 24), forgotten_topics_data=(), rack_id="",
                          session_id=i32(0), session_epoch=i32(-1),
                          topics=(kp.make_entity(mod.FetchTopic, topic="t", partitions=(part,)),))


def test_the_proxy_logs_what_it_hands_a_consumer_only_while_the_log_is_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        cluster = FakeCluster({"t": 1})
        broker = cluster.add_broker(1)
        await broker.start()
        proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", broker.port), broker=1)],
                           events=MemoryEventSink(), rewrite=False)
        await proxy.start()
        control = ControlServer(proxy, f"unix:{tmp_path}/control.sock")
        await control.start()
        try:
            cluster.append("t", 0, make_record_batch([b'{"id": "r-0"}', b'{"id": "r-1"}']), 1, "test")
            cluster.append("t", 0, make_record_batch([b'{"id": "r-2"}']), 2, "test")
            client = await RawClient().connect(f"127.0.0.1:{proxy.listeners[0].bound[1]}")
            assert "off" in handle_command(proxy, {"op": "deliveries"})["error"]
            await _fetch(client, 0, 1)  # off: not logged
            started = await asyncio.to_thread(lambda: _call(control.address, "start", topics=["t"]))
            assert started["kept"] == 0 and started["on"] and started["topics"] == ["t"]
            answer = await _fetch(client, 1, 2)  # the first batch starts at 0: record 0 is skipped
            assert len(answer.responses[0].partitions[0].records) > 0
            log = await asyncio.to_thread(lambda: _call(control.address, "read"))
            assert [(r["offset"], unb64(r["value"])) for r in log["records"]] == [(1, b'{"id": "r-1"}'),
                                                                                 (2, b'{"id": "r-2"}')]
            assert log["records"][0]["client_id"] == "signup-processor" and log["records"][0]["broker"] == 1
            assert log["below_fetch_offset"] == 1 and not log["truncated"]
            stopped = await asyncio.to_thread(lambda: _call(control.address, "stop"))
            assert stopped["kept"] == 2 and not stopped["on"]
            await _fetch(client, 0, 3)  # stopped: not logged, still readable
            assert handle_command(proxy, {"op": "deliveries"})["deliveries"]["kept"] == 2
            assert not handle_command(proxy, {"op": "deliveries", "start": -1})["ok"]
            assert handle_command(proxy, {"op": "deliveries_stop", "clear": True})["ok"]
            assert not handle_command(proxy, {"op": "deliveries"})["ok"]
            await client.close()
        finally:
            await control.stop()
            await proxy.stop()
            await broker.stop()
    asyncio.run(scenario())


def _call(address: str, what: str, **fields: Any) -> dict[str, Any]:
    client = ControlClient(address)
    try:
        if what == "start":
            return client.deliveries_start(**fields)
        if what == "stop":
            return client.deliveries_stop()
        with pytest.raises(ControlError, match="'max'"):
            client.call("deliveries", max=0)
        return client.deliveries()
    finally:
        client.close()
