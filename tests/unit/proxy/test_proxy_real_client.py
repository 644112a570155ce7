"""A real confluent-kafka (librdkafka) producer through the fault proxy, in front of fake brokers.

No Kafka broker: the fake cluster (kafkaproof.proxy.fake_broker) answers
ApiVersions, Metadata and Produce with kio-encoded responses and records what
it "wrote", which is enough for librdkafka to negotiate versions, discover the
brokers through rewritten metadata, and produce.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from kafkaproof.proxy import FaultProxy, MemoryEventSink, Route  # noqa: E402
from kafkaproof.proxy.fake_broker import FakeCluster  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.timeout(90)]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Any:
    """Runs the proxy's event loop: the stock one, and uvloop (what the CLI uses)."""
    if request.param == "uvloop":
        return pytest.importorskip("uvloop").run
    return asyncio.run


@contextlib.asynccontextmanager
async def proxied_cluster(partitions: int = 4) -> AsyncIterator[tuple[FakeCluster, FaultProxy, MemoryEventSink]]:
    cluster = FakeCluster({"t": partitions})
    brokers = [cluster.add_broker(node_id) for node_id in (1, 2)]
    for broker in brokers:
        await broker.start()
    sink = MemoryEventSink()
    # No node ids given: the proxy learns them from the brokers' metadata.
    proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", b.port)) for b in brokers], events=sink, seed=3)
    await proxy.start()
    try:
        yield cluster, proxy, sink
    finally:
        await proxy.stop()
        for broker in brokers:
            await broker.stop()


def produce(bootstrap: str, count: int, partition: int | None = None, **config: Any) -> list[tuple[int, int, str | None]]:
    """Produce ``count`` values; returns (partition, offset, error) per delivery report."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": False,
            "message.timeout.ms": 20000, "retry.backoff.ms": 50}
    conf.update(config)
    producer = confluent_kafka.Producer(conf)
    reports: list[tuple[int, int, str | None]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((msg.partition(), msg.offset(), None if err is None else err.name()))

    for i in range(count):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce("t", value=f"value-{i}".encode(), key=str(i).encode(), on_delivery=on_delivery, **kwargs)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages undelivered"
    return reports


def test_producer_reaches_every_broker_only_through_the_proxy(run: Any) -> None:
    async def scenario() -> None:
        async with proxied_cluster() as (cluster, proxy, sink):
            reports = await asyncio.to_thread(produce, proxy.bootstrap, 200)
            assert len(reports) == 200 and all(err is None for _, _, err in reports)
            assert cluster.records_written("t") == 200
            assert {p for p, _, _ in reports} == {0, 1, 2, 3}  # both brokers lead partitions
            for listener, broker in zip(proxy.listeners, cluster.brokers):
                assert listener.node_id == broker.node_id
                # every connection the broker saw came from this proxy listener
                assert broker.connections == listener.stats.connections_total >= 1
            assert sink.of("address_rewrite") and not sink.of("protocol_error") and not sink.of("unmapped_broker")
    run(scenario())


def test_lost_ack_with_reset_makes_the_real_producer_write_a_duplicate(run: Any) -> None:
    async def scenario() -> None:
        async with proxied_cluster() as (cluster, proxy, sink):
            proxy.add_rule({"action": "lost_ack", "api": "produce", "topic": "t", "partitions": [0], "count": 1,
                            "reset": True})
            reports = await asyncio.to_thread(produce, proxy.bootstrap, 10, 0)
            assert all(err is None for _, _, err in reports)
            dropped = sink.of("fault", phase="response_dropped")
            assert len(dropped) == 1
            first_write = dropped[0]["detail"]["results"][0]
            assert first_write["error"] == "NONE" and first_write["partition"] == 0
            # the broker holds the faulted batch and its retry: duplicates, as with a real broker;
            # the event names how many offsets the unacknowledged write took
            (lost_records,) = dropped[0]["topics"][0]["record_counts"]
            assert 1 <= lost_records <= 10 and cluster.records_written("t") == 10 + lost_records
            acked = sorted(offset for _, offset, _ in reports)
            assert first_write["base_offset"] not in acked
    run(scenario())


def test_lost_ack_keeping_the_connection_times_out_a_written_batch(run: Any) -> None:
    # librdkafka waits for a produce response until message.timeout.ms (request.timeout.ms
    # is only the broker-side ack timeout), then fails the messages: they are reported
    # as failed although the broker wrote them.
    async def scenario() -> None:
        async with proxied_cluster() as (cluster, proxy, sink):
            proxy.add_rule({"action": "lost_ack", "api": "produce", "topic": "t", "partitions": [0], "count": 1})
            reports = await asyncio.to_thread(produce, proxy.bootstrap, 10, 0, **{"message.timeout.ms": 1500})
            assert {err for _, _, err in reports} == {"_MSG_TIMED_OUT"}
            assert len(sink.of("fault", phase="response_dropped")) == 1
            assert cluster.records_written("t") == 10
    run(scenario())


def test_injected_retriable_error_is_retried_without_duplicates(run: Any) -> None:
    async def scenario() -> None:
        async with proxied_cluster() as (cluster, proxy, sink):
            proxy.add_rule({"action": "error", "api": "produce", "error": "NOT_ENOUGH_REPLICAS", "count": 2})
            reports = await asyncio.to_thread(produce, proxy.bootstrap, 20, 1)
            assert all(err is None for _, _, err in reports)
            assert len(sink.of("fault", phase="answered_without_forwarding")) == 2
            assert cluster.records_written("t") == 20
    run(scenario())


def test_error_after_append_duplicates(run: Any) -> None:
    async def scenario() -> None:
        async with proxied_cluster() as (cluster, proxy, sink):
            proxy.add_rule({"action": "error", "api": "produce", "error": "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                            "forward": True, "count": 1})
            reports = await asyncio.to_thread(produce, proxy.bootstrap, 5, 2, **{"linger.ms": 50})
            assert all(err is None for _, _, err in reports)
            replaced = sink.of("fault", phase="response_replaced")
            assert len(replaced) == 1 and replaced[0]["detail"]["results"][0]["error"] == "NONE"
            assert cluster.records_written("t") > 5
    run(scenario())
