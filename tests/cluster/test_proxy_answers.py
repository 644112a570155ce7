"""Proxy faults that alter answers, against real brokers and librdkafka: Metadata that misstates a leader
(missing or stale), Fetch answers with corrupted or repeated record batches. Each fault fires, the client
shows its effect, and after the heal the client works on the truth again.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest

from kafkaproof.cluster import ClusterConfig, LocalCluster
from kafkaproof.cluster.heal import cluster_fault_log
from kafkaproof.faults import FaultInjector
from kafkaproof.spec.faults import FaultSpec

from support import fault_events

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster():
    """A 3-broker cluster with a proxy per broker, for the whole module."""
    c = LocalCluster.up(ClusterConfig(name=f"pxa-{uuid.uuid4().hex[:6]}", brokers=3, proxy=True))
    try:
        yield c
    finally:
        c.down(keep_logs=False)


def new_topic(cluster: LocalCluster) -> str:
    topic = f"pxa-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
    cluster.wait_in_sync(topic)
    return topic


def fired(cluster: LocalCluster, fault_id: str) -> int:
    """How often the fault's rule acted, summed over the proxies (what its heal records)."""
    total = 0
    for nid in cluster.proxy_ids():
        client = cluster.proxy_control(nid)
        try:
            total += sum(r["fired"] for r in client.rules() if r["id"] == fault_id)
        finally:
            client.close()
    return total


def fired_at_heal(cluster: LocalCluster, fault_id: str) -> int:
    """How often the fault's rule acted in all, as its heal record in the cluster's fault log says."""
    records = [json.loads(line) for line in cluster_fault_log(cluster).read_text().splitlines() if line.strip()]
    (heal,) = [r for r in records if r["event"] == "heal" and r["fault_id"] == fault_id]
    return heal["proxy_fired"]


def consume(bootstrap: str, topic: str, want: int, timeout_s: float = 15, errors: list | None = None,
            **config) -> list[tuple[int, bytes]]:
    """(offset, value) of what a fresh librdkafka consumer of partition 0 delivers, from the start (its
    errors appended to ``errors``)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pxa-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 2, **config})
    out: list[tuple[int, bytes]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.3):
                if m.error() is None:
                    out.append((m.offset(), m.value()))
                elif errors is not None:
                    errors.append(m.error().name())
        return out
    finally:
        c.close()


def write(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    """Write the values to partition 0 directly (not through a proxy), in one batch."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.direct_bootstrap(), "linger.ms": 100, "log_level": 2})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(20) == 0


@pytest.mark.parametrize("mode", ["missing", "stale"])
def test_a_misstated_leader_holds_the_producer_until_the_heal(cluster, mode):
    """missing: no leader, the record waits; stale: the record goes to a follower and is refused
    (NOT_LEADER_OR_FOLLOWER) again and again. Healed, it is written once."""
    from confluent_kafka import Producer
    topic = new_topic(cluster)
    leader = cluster.leader_of(topic, 0)
    stats: list[dict] = []
    reports: list[tuple[str | None, int]] = []
    injector = FaultInjector(cluster, topic=topic)
    fault = injector.inject(FaultSpec("metadata", "all", {"mode": mode, "topic": topic}))
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 60000, "statistics.interval.ms": 200, "log_level": 2,
                  "stats_cb": lambda s: stats.append(json.loads(s))})
    try:
        p.produce(topic, b"held", partition=0, on_delivery=lambda e, m: reports.append((e and e.name(), m.offset())))
        end = time.monotonic() + 4
        while time.monotonic() < end:
            p.poll(0.2)
        assert reports == [], f"delivered while partition 0's leader was {mode}"
        assert fired(cluster, fault.fault_id) >= 1
        produce_to = {b["nodeid"]: b["req"].get("Produce", 0) for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0}
    finally:
        injector.heal(fault.fault_id)
    healed = time.monotonic()
    assert p.flush(30) == 0
    assert reports[0][0] is None, reports
    recovery_s = time.monotonic() - healed
    events = fault_events(cluster, fault.fault_id)
    misstated = [e for e in events if e["phase"] == "metadata_misstated"]
    hidden = [e for e in events if e["phase"] == "leader_hint_hidden"]
    # Compared with the count at the heal: a producer refused by a stale leader keeps asking for
    # Metadata, so the rule may fire again between a count taken before the heal and the heal.
    n = fired_at_heal(cluster, fault.fault_id)
    assert len(misstated) == n and len(misstated) + len(hidden) == len(events)
    change = misstated[0]["detail"]["changes"][0]
    assert change["old_leader"] == leader and change["partition"] == 0
    if mode == "missing":
        assert change["new_leader"] == -1 and produce_to.get(leader, 0) == 0 and not hidden
    else:
        # the producer sent to the replica named leader and was refused there, without the hint to the leader
        assert change["new_leader"] != leader and produce_to.get(change["new_leader"], 0) >= 1
        assert hidden and hidden[0]["detail"]["hints"][0]["leader"] == leader
    assert [v for _, v in consume(cluster.bootstrap_servers(), topic, 1)] == [b"held"]
    print(f"{mode}: fired {n} times until the heal, {len(hidden)} leader hints hidden, delivered {recovery_s:.1f} s after the heal, Produce requests {produce_to}")


def test_a_corrupted_batch_reaches_the_consumer_and_the_truth_after_the_heal(cluster):
    topic = new_topic(cluster)
    values = [f"kp|run|{i}|padding".encode() for i in range(10)]
    write(cluster, topic, values)
    injector = FaultInjector(cluster, topic=topic)
    fault = injector.inject(FaultSpec("fetch_corrupt", "leader:0", {"count": 2}))
    errors: list[str] = []
    try:
        corrupted = consume(cluster.bootstrap_servers(), topic, len(values))
        checked = consume(cluster.bootstrap_servers(), topic, len(values), timeout_s=8, errors=errors,
                          **{"check.crcs": True})
        assert fired(cluster, fault.fault_id) == 2
    finally:
        injector.heal(fault.fault_id)
    # librdkafka does not check CRCs by default: every value arrives with its first byte inverted
    assert corrupted == [(i, bytes([v[0] ^ 0xFF]) + v[1:]) for i, v in enumerate(values)]
    # with check.crcs the consumer refuses the batch, fetches it again (the rule is used up) and gets the truth
    print(f"check.crcs: errors {errors}, then {len(checked)} true values")
    assert errors and checked == list(enumerate(values))
    event = fault_events(cluster, fault.fault_id)[0]
    assert event["phase"] == "records_corrupted"
    (batch,) = event["detail"]["batches"]  # topic: the name, or the id when that proxy saw no Metadata naming it
    assert batch | {"topic": topic} == {"topic": topic, "partition": 0, "base_offset": 0, "records": 10,
                                        "values_corrupted": 10}

    assert consume(cluster.bootstrap_servers(), topic, len(values)) == list(enumerate(values))


def test_a_repeated_batch_is_delivered_twice_at_new_offsets(cluster):
    topic = new_topic(cluster)
    values = [f"kp|run|{i}|padding".encode() for i in range(5)]
    write(cluster, topic, values)
    injector = FaultInjector(cluster, topic=topic)
    fault = injector.inject(FaultSpec("fetch_duplicate", "leader:0", {"count": 1}))
    try:
        got = consume(cluster.bootstrap_servers(), topic, 2 * len(values), timeout_s=8)
        assert fired(cluster, fault.fault_id) == 1
    finally:
        injector.heal(fault.fault_id)
    # the copy sits at offsets 5..9, past the log's end
    assert got[:2 * len(values)] == list(enumerate(values + values))
    (event,) = fault_events(cluster, fault.fault_id)
    (batch,) = event["detail"]["batches"]
    assert batch | {"topic": topic} == {"topic": topic, "partition": 0, "base_offset": 0, "records": 5,
                                        "copy_offset": 5}
    assert consume(cluster.bootstrap_servers(), topic, len(values)) == list(enumerate(values))
