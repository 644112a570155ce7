"""Disk faults on a real cluster (diskfs under each node's log directory): a failing, full or slow disk does
what it says and heals (also from another process), and a power loss of every replica drops acknowledged
records unless the topic fsyncs every message."""
from __future__ import annotations

import time
import uuid

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.cluster import ClusterConfig, LocalCluster, attach
from kafkaproof.cluster.disk import fuse_mounts_under
from kafkaproof.cluster.state import cluster_dir
from kafkaproof.faults import FaultInjector, heal_all
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.scenario import load

from support import REPO, produce

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(400)]


def produce_timed(cluster: LocalCluster, topic: str, n: int, timeout_s: float = 30.0) -> tuple[int, float]:
    """Produce `n` records with acks=all, each given up after `timeout_s`: (acknowledged, seconds it took)."""
    start = time.monotonic()
    acked, _ = produce(cluster.direct_bootstrap(), topic, n, **{"message.timeout.ms": int(timeout_s * 1000),
                                                                  "linger.ms": 0})
    return acked, time.monotonic() - start


def wait_state(cluster: LocalCluster, node_id: int, want: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.node_state(node_id) == want:
            return True
        time.sleep(0.2)
    return False


def test_a_failing_full_or_slow_disk_acts_and_heals_also_from_another_process():
    name = f"dk-{uuid.uuid4().hex[:6]}"
    with LocalCluster.up(ClusterConfig(name=name, brokers=3, disk=True,
                                       broker_config={"broker.session.timeout.ms": 6000,
                                                      "broker.heartbeat.interval.ms": 1000})) as cluster:
        assert len(fuse_mounts_under(cluster_dir(name))) == 3
        topic = "disky"
        cluster.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
        assert produce_timed(cluster, topic, 50)[0] == 50
        injector = FaultInjector(cluster, topic=topic)

        # A slow disk: every write of the leader waits 200 ms, so an acks=all round trip does too.
        slow = injector.inject(FaultSpec("disk_latency", "leader:0", {"ms": 200, "op": "write"}))
        acked, took = produce_timed(cluster, topic, 3)
        assert acked == 3 and took >= 0.2, f"3 records in {took:.2f} s on a disk that waits 200 ms a write"
        injector.heal(slow.fault_id)

        # EIO on every write: Kafka takes the log directory offline and halts the broker; the heal starts it.
        leader = cluster.leader_of(topic, 0)
        failing = injector.inject(FaultSpec("disk_error", "leader:0", {"op": "write"}))
        assert failing.heal == {"disk_rules": [[leader, failing.fault_id]], "restart": [leader]}
        produce_timed(cluster, topic, 20)
        assert wait_state(cluster, leader, "dead", 30), "the broker whose disk fails every write kept running"
        assert "log dir" in cluster.node_log_since_start(leader).lower() or "Input/output error" in \
            cluster.node_log_since_start(leader)
        assert cluster.leader_of(topic, 0) != leader
        injector.heal(failing.fault_id)
        assert cluster.node_state(leader) == "running"
        cluster.wait_in_sync(topic, timeout_s=60)

        # A full disk, left behind by a process that crashed: another process heals it from the state file.
        full = FaultInjector(cluster, topic=topic).inject(FaultSpec("disk_full", "leader:0"))
        node = full.nodes[0]
        produce_timed(cluster, topic, 20, timeout_s=10)
        assert wait_state(cluster, node, "dead", 30), "a broker on a full disk kept running"
        assert "No space left on device" in cluster.node_log_since_start(node)
        later = attach(name)
        assert heal_all(later) == [full.fault_id]
        assert later.node_state(node) == "running" and later.active_faults() == []
        later.wait_in_sync(topic, timeout_s=60)
        assert produce_timed(later, topic, 10)[0] == 10
        records = [r for r in (cluster_dir(name) / "faults.jsonl").read_text().splitlines() if '"heal"' in r]
        assert all('"disk_fired": 0' not in r for r in records), records
    assert fuse_mounts_under(cluster_dir(name)) == []


def _run(tmp_path, scenario: str, messages: int):
    doc = yaml.safe_load((REPO / "scenarios" / f"{scenario}.yaml").read_text())
    doc["producers"]["messages"] = messages
    path = tmp_path / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path)), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["kind"] == "power_loss" and sorted(fault["nodes"]) == [1, 2, 3] and fault["heal_ns"]
    sends = pq.read_table(ledger.table_path(result.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(result.run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    return fault, acked, acked - set(audit["value_id"])


@pytest.mark.long
def test_a_power_loss_of_every_replica_drops_acknowledged_records_unless_each_fsyncs_every_message(tmp_path):
    import json
    fault, acked, lost = _run(tmp_path, "disk-power-loss-all-replicas", 3000)
    effect = json.loads(fault["effect"])
    assert set(effect["node_states"].values()) == {"dead"}
    assert all(n["bytes_dropped"] > 0 for n in effect["power_loss"].values()), effect["power_loss"]
    assert len(acked) > 2000 and len(lost) >= 500, f"{len(lost)} of {len(acked)} acknowledged records lost"
    fault, acked, lost = _run(tmp_path, "disk-power-loss-all-replicas-fsync", 3000)
    assert len(acked) > 2000 and not lost, f"{len(lost)} of {len(acked)} acknowledged records lost with fsync"
