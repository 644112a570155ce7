"""Corruption at rest with Kafka's own code: a flipped byte of a real segment fails Kafka's CRC check
(`org.apache.kafka.tools.DumpLogSegments` of the cached 4.3.1 jars, a few seconds of Java), and a broker whose active
segment was cut to half while it was down recovers to the whole batches left."""
from __future__ import annotations

import re
import subprocess
import time
import uuid

import pytest

from kafkaproof.cluster import ClusterConfig, LocalCluster
from kafkaproof.cluster.corrupt import bitflip
from kafkaproof.cluster.install import ensure_kafka
from kafkaproof.faults import FaultInjector
from kafkaproof.proxy.fake_broker import make_record_batch
from kafkaproof.proxy.records import split_batches
from kafkaproof.spec.faults import FaultSpec

from support import produce, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def dump_validity(segment) -> list[str]:
    """`isvalid` of each batch of a segment as Kafka's DumpLogSegments reads it."""
    dist = ensure_kafka("4.3.1")
    out = subprocess.run(dist.java_command("org.apache.kafka.tools.DumpLogSegments", "--files", str(segment)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return re.findall(r"isvalid: (\w+)", out.stdout)


class _OnlyAt:
    """A random source that picks the one range starting at `offset` (bitflip with range_bytes 1)."""

    def __init__(self, offset: int):
        self.offset, self.seen = offset, -1

    def random(self) -> float:
        self.seen += 1
        return 0.0 if self.seen == self.offset else 1.0

    def randrange(self, n: int) -> int:
        return n - 1 if n == 8 else 0  # the top bit of the byte; the range's only byte


def test_one_flipped_byte_of_a_real_segment_fails_kafkas_crc_check_of_its_batch(tmp_path):
    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    first = make_record_batch([b"value-%d" % i for i in range(5)], base_offset=0, base_timestamp=1_700_000_000_000)
    second = make_record_batch([b"value-%d" % i for i in range(5, 9)], base_offset=5, base_timestamp=1_700_000_000_001)
    segment.write_bytes(first + second)
    assert dump_validity(segment) == ["true", "true"]
    # One bit of one byte in the second batch's records (the CRC covers them), flipped by the fault's `bitflip`
    # on a range of that one byte.
    done = bitflip(segment, 1.0, 1, _OnlyAt(len(first) + 70))
    assert done["flipped"] == 1 and done["offsets"] == [len(first) + 70]
    assert dump_validity(segment) == ["true", "false"]


@pytest.mark.long  # 19 s of a 21.5 s run (measured 2026-11-28): past make test's 15 s a test
def test_the_active_segment_cut_to_half_while_the_broker_is_down_recovers_to_the_whole_batches_left():
    name = f"fc-{uuid.uuid4().hex[:6]}"
    with LocalCluster.up(ClusterConfig(name=name, brokers=1)) as cluster:
        topic = "cut"
        cluster.create_topic(topic, 1, 1)
        for _ in range(5):  # five batches at least: the cut lands inside the third
            acked, errors = produce(cluster.direct_bootstrap(), topic, 80, **{"linger.ms": 0})
            assert acked == 80, errors
        injector = FaultInjector(cluster, topic=topic)
        fault = injector.inject(FaultSpec("file_corrupt", "node:1", {
            "file": "segment", "mode": "truncate", "segment": "active", "when": "stopped", "allow_majority": True}))
        assert fault.heal == {"restart": [1]} and cluster.node_state(1) == "dead"
        segment = cluster.log_dir(1) / f"{topic}-0" / "00000000000000000000.log"
        batches, _ = split_batches(segment.read_bytes())
        whole_left = batches[-1].next_offset if batches else 0
        assert 0 < whole_left < 400, f"{len(batches)} whole batches left"
        injector.heal(fault.fault_id)
        # the heal returns once the broker process runs; its recovery is logged a moment later
        wait_for(lambda: "Recovering unflushed segment" in cluster.node_log_since_start(1), 60,
                 "the broker to log its recovery of the cut segment")
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": cluster.direct_bootstrap(), "group.id": "kp-test"})
        try:
            deadline, end = time.monotonic() + 30, None
            while time.monotonic() < deadline:
                try:
                    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
                    break
                except Exception:
                    time.sleep(0.5)
        finally:
            consumer.close()
        assert end == whole_left, f"log end {end}, the whole batches left end at {whole_left}"
