"""`file_corrupt` on a compose cluster (issue 45): the fault changes the files of a container's data volume
(found by `docker inspect`); a follower's segment with bits flipped while its container is down is read as
invalid by Kafka's own DumpLogSegments, and the container, started at the heal, recovers and rejoins the ISR
while every offset is still served."""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from kafkaproof.cluster import attach, start_cluster, state
from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster.compose import compose_project
from kafkaproof.cluster.install import ensure_kafka
from kafkaproof.faults import FaultInjector
from kafkaproof.spec.cluster import ClusterConfig
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

from support import needs_root, produce, wait_for

# the data volume is the engine's directory on this host, root's
pytestmark = [pytest.mark.compose, pytest.mark.long, needs_root, pytest.mark.timeout(420)]

FAST = {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 1000}


def dump_validity(segment) -> list[str]:
    """`isvalid` of each batch of a segment as Kafka's DumpLogSegments (this host's 4.3.1 jars) reads it."""
    dist = ensure_kafka("4.3.1")
    out = subprocess.run(dist.java_command("org.apache.kafka.tools.DumpLogSegments", "--files", str(segment)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return re.findall(r"isvalid: (\w+)", out.stdout)


def read_all(bootstrap: str, topic: str, want: int, timeout_s: float = 60) -> list[int]:
    """The offsets of partition 0 a fresh consumer reads from the beginning (up to `want` of them)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kp-t-corrupt", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(offsets) < want and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                offsets.append(msg.offset())
    finally:
        consumer.close()
    return offsets


def test_bits_flipped_in_a_stopped_containers_segment_are_invalid_and_it_rejoins_the_isr(tmp_path):
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(DEFAULT_KAFKA_VERSION)
    name = "kp-t-compose-corrupt"
    t0 = time.monotonic()
    cluster = start_cluster(ClusterConfig(name=name, backend="compose", brokers=3, broker_config=FAST))
    try:
        assert "file_corrupt" in cluster.supported_faults
        cluster.create_topic("orders", 1, 3, {"min.insync.replicas": 2})
        cluster.wait_in_sync("orders")
        for _ in range(3):  # three batches of 300 at least
            assert produce(cluster.bootstrap_servers(), "orders", 300, **{"linger.ms": 0}) == (300, [])
        follower = cluster.followers("orders", 0)[0]
        volume = cluster.log_dir(follower)
        assert volume.is_dir() and (volume / "orders-0").is_dir()
        with FaultInjector(cluster, topic="orders", log_path=tmp_path / "faults.jsonl") as faults:
            fault = faults.inject(FaultSpec("file_corrupt", f"node:{follower}", {
                "file": "segment", "mode": "bitflip", "probability": 1.0, "range_bytes": 4096, "seed": 45,
                "when": "stopped", "partition": 0}))
            assert cluster.node_state(follower) == "dead"
            inject = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()][0]
            flipped = sum(f["flipped"] for f in inject["effect"]["corrupted"][str(follower)])
            segment = volume / "orders-0" / "00000000000000000000.log"
            validity = dump_validity(segment)
            print(f"compose: node {follower}'s segment ({segment.stat().st_size:,} bytes, volume {volume}): "
                  f"{flipped} bits flipped, {validity.count('false')} of {len(validity)} batches invalid")
            assert "false" in validity
            healed_at = time.monotonic()
            faults.heal(fault.fault_id)
            assert cluster.node_state(follower) == "running"
            wait_for(lambda: follower in cluster.partitions("orders")[0]["isr"], 90,
                     f"node {follower} to rejoin the ISR of orders-0")
            print(f"compose: node {follower} back in the ISR {time.monotonic() - healed_at:.1f}s after the heal")
        offsets = read_all(cluster.bootstrap_servers(), "orders", 900)
        assert offsets == list(range(900)), f"{len(offsets)} offsets read"
        print(f"compose corruption test: {time.monotonic() - t0:.0f} s")
    finally:
        if name in state.list_clusters():
            attach(name).down(keep_logs=False)
    assert not any(de.labelled(compose_project(name)).values())
