"""Unit tests of the proxy's `hold` rule (proxy/held.py): a transactional Produce held past the client's
timeout and delivered later on the proxy's own broker connection; and the transaction APIs' rules."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kafkaproof.proxy import FaultProxy, MemoryEventSink, Route, RuleError, parse_rule
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy.fake_broker import FakeCluster, RawClient, produce_request

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
RANGES = {kp.PRODUCE: (3, 9), kp.FETCH: (4, 12), kp.METADATA: (0, 12), kp.API_VERSIONS: (0, 4), 22: (0, 4)}


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Any:
    """Runs a coroutine on a fresh event loop: the stock one, and uvloop (what the CLI uses)."""
    if request.param == "uvloop":
        return pytest.importorskip("uvloop").run
    return asyncio.run


@dataclasses.dataclass
class Stack:
    cluster: FakeCluster
    proxy: FaultProxy
    sink: MemoryEventSink

    async def client(self) -> RawClient:
        host, port = self.proxy.listeners[0].advertised
        return await RawClient().connect(f"{host}:{port}")

    def faults(self, **match: Any) -> list[dict[str, Any]]:
        return self.sink.of("fault", **match)


@contextlib.asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    """One fake broker behind one proxy."""
    cluster = FakeCluster({"t": 3})
    broker = cluster.add_broker(1, record_frames=True, api_ranges=RANGES)
    await broker.start()
    sink = MemoryEventSink()
    proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", broker.port), broker=1)], events=sink, seed=7)
    await proxy.start()
    try:
        yield Stack(cluster, proxy, sink)
    finally:
        await proxy.stop()
        await broker.stop()


def metadata_request(version: int, topics: list[str]) -> Any:
    cls = kp.request_type(kp.METADATA, version)
    mod = sys.modules[cls.__module__]
    entries = tuple(kp.make_entity(mod.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    return kp.make_entity(cls, topics=entries, allow_auto_topic_creation=False,
                          include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


async def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_hold_rule_parses_and_refuses_other_apis() -> None:
    rule = parse_rule({"action": "hold", "ms": 8000, "count": 1})
    assert rule.api == frozenset({kp.PRODUCE}) and rule.hold_ms == 8000 and rule.transactional
    assert rule.as_json()["ms"] == 8000 and rule.as_json()["transactional"] is True
    assert parse_rule(rule.as_json()).hold_ms == 8000
    assert not parse_rule({"action": "hold", "ms": 5, "transactional": False}).transactional
    with pytest.raises(RuleError, match="'api'"):
        parse_rule({"action": "hold", "ms": 10, "api": "fetch"})
    with pytest.raises(RuleError, match="'ms'"):
        parse_rule({"action": "hold"})
    with pytest.raises(RuleError, match="'ms'"):
        parse_rule({"action": "hold", "ms": 0})


@pytest.mark.parametrize("api", ["end_txn", "add_partitions_to_txn", "txn_offset_commit", "init_producer_id"])
def test_transaction_apis_take_lost_answer_error_and_latency_rules(api: str) -> None:
    key = kp.api_key_of(api)
    assert parse_rule({"action": "lost_ack", "api": api}).api == frozenset({key})
    assert parse_rule({"action": "error", "api": api, "error": "COORDINATOR_NOT_AVAILABLE"}).error == 15
    assert parse_rule({"action": "latency", "api": api, "ms": 3000}).latency is not None


def test_a_held_produce_is_delivered_on_the_proxys_own_connection_after_the_client_left(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            rid = s.proxy.add_rule({"action": "hold", "ms": 400, "count": 1})
            client = await s.client()
            # Not transactional: not held (transactional defaults to true).
            await client.send(produce_request(9, {"t": [1]}), 1)
            await client.recv_raw()
            await client.send(produce_request(9, {"t": [0]}, records_per_partition=3, transactional_id="copier-0"), 2)
            await client.send(metadata_request(9, ["t"]), 3)  # queued behind the held request
            await asyncio.sleep(0.1)
            assert ("t", 0) not in s.cluster.logs  # held: the broker has not seen it
            await client.close()  # the client's request timeout
            await _until(lambda: s.faults(phase="held_answered"), timeout=5)
            assert len(s.cluster.logs[("t", 0)]) == 1  # delivered after the client left
            held, = s.faults(phase="held")
            assert held["rule_id"] == rid and held["correlation_id"] == 2
            assert held["detail"]["transactional_id"] == "copier-0"
            assert held["detail"]["batches"] == [{"topic": "t", "partition": 0, "producer_id": -1,
                                                  "producer_epoch": -1, "base_sequence": -1}]
            gone, = s.faults(phase="held_client_gone")
            assert gone["detail"]["requests_dropped"] == 1
            assert gone["detail"]["dropped"] == [{"api": "metadata", "correlation_id": 3}]
            delivered, = s.faults(phase="held_delivered")
            assert delivered["detail"]["own_connection"] and delivered["detail"]["held_ms"] >= 390
            answered, = s.faults(phase="held_answered")
            assert answered["detail"]["errors"] == ["NONE"]
            assert answered["detail"]["results"][0]["partition"] == 0
            assert not s.faults(phase="held_unanswered")
            # count 1: the next transactional write passes.
            other = await s.client()
            await other.send(produce_request(9, {"t": [0]}, transactional_id="copier-0"), 1)
            await other.recv_raw()
            assert len(s.cluster.logs[("t", 0)]) == 2
    run(scenario())


def test_a_held_produce_whose_client_stays_is_released_in_its_stream(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "hold", "ms": 200, "transactional": False})
            client = await s.client()
            started = time.monotonic()
            await client.send(produce_request(9, {"t": [0]}), 1)
            await client.send(metadata_request(9, ["t"]), 2)
            first = await client.recv_raw()
            assert kp.response_correlation_id(first[4:]) == 1 and time.monotonic() - started >= 0.19
            second = await client.recv_raw()
            assert kp.response_correlation_id(second[4:]) == 2
            released, = s.faults(phase="held_released")
            assert released["detail"]["client_connected"] is True
            assert not s.faults(phase="held_delivered")
            await client.close()
    run(scenario())


def test_a_held_request_not_delivered_when_the_proxy_stops_is_reported(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "hold", "ms": 60000, "count": 1})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, transactional_id="x"), 1)
            await _until(lambda: s.faults(phase="held"))
            await client.close()
            await _until(lambda: s.faults(phase="held_client_gone"))
            await s.proxy.stop()
            unanswered, = s.faults(phase="held_unanswered")
            assert unanswered["detail"]["reason"] == "proxy stopping"
            assert ("t", 0) not in s.cluster.logs
    run(scenario())


def test_a_second_held_request_behind_the_first_is_dropped_with_the_client(run: Any) -> None:
    async def scenario() -> None:
        async with stack() as s:
            s.proxy.add_rule({"action": "hold", "ms": 300, "count": 2})
            client = await s.client()
            await client.send(produce_request(9, {"t": [0]}, transactional_id="c"), 1)
            await client.send(produce_request(9, {"t": [1]}, transactional_id="c"), 2)
            await _until(lambda: len(s.faults(phase="held")) == 2)
            await client.close()
            await _until(lambda: s.faults(phase="held_answered"), timeout=5)
            (answered,) = s.faults(phase="held_answered")
            assert answered["correlation_id"] == 1
            (dropped,) = s.faults(phase="held_unanswered")
            assert dropped["correlation_id"] == 2 and "queued behind another held request" in dropped["detail"]["reason"]
            assert ("t", 1) not in s.cluster.logs and len(s.cluster.logs[("t", 0)]) == 1
    run(scenario())
