"""Clock faults on a real cluster: a node's JVM sees its clock move (and move back on heal, also after a
crash), and a forward jump on every broker deletes acknowledged records through time retention."""
from __future__ import annotations

import time
import uuid

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.cluster import ClusterConfig, LocalCluster
from kafkaproof.faults import FaultInjector, heal_all
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.scenario import load

from support import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def broker_timestamp_ms(cluster: LocalCluster, topic: str) -> int:
    """The timestamp the leader gives a record it appends now (the topic uses LogAppendTime)."""
    from confluent_kafka import Producer
    stamps: list[int] = []
    p = Producer({"bootstrap.servers": cluster.direct_bootstrap(), "acks": "all", "log_level": 2})
    p.produce(topic, value=b"tick", on_delivery=lambda err, msg: stamps.append(msg.timestamp()[1]))
    assert p.flush(30) == 0
    return stamps[0]


def test_a_nodes_clock_moves_with_the_fault_and_back_when_healed_by_a_later_process(tmp_path):
    name = f"ck-{uuid.uuid4().hex[:6]}"
    with LocalCluster.up(ClusterConfig(name=name, brokers=1, clock=True)) as cluster:
        topic = "stamps"
        cluster.create_topic(topic, 1, 1, {"message.timestamp.type": "LogAppendTime"})
        assert abs(broker_timestamp_ms(cluster, topic) - time.time() * 1000) < 5_000
        fault = FaultInjector(cluster, topic=topic).inject(FaultSpec("clock_skew", "leader:0", {"offset_s": 7200}))
        (active,) = cluster.active_faults()
        assert active["heal"] == {"clock": [1]}
        ahead = broker_timestamp_ms(cluster, topic) - time.time() * 1000
        assert 7_195_000 < ahead < 7_205_000, f"the broker stamps {ahead / 1000:.0f} s ahead, not 7200 s"
        # The injecting process is gone (a crashed run): the recorded heal puts the clock back.
        assert heal_all(cluster) == [fault.fault_id]
        assert abs(broker_timestamp_ms(cluster, topic) - time.time() * 1000) < 5_000
        assert cluster.active_faults() == []


def test_every_brokers_clock_two_days_ahead_lets_time_retention_delete_acknowledged_records(tmp_path):
    doc = yaml.safe_load((REPO / "scenarios" / "clock-jump-forward-retention.yaml").read_text())
    doc["producers"]["messages"] = 1500
    path = tmp_path / "clock-jump.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path)), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["kind"] == "clock_skew" and sorted(fault["nodes"]) == [1, 2, 3] and fault["heal_ns"]
    sends = pq.read_table(ledger.table_path(result.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(result.run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    assert len(acked) == 1500
    gone = acked - set(audit["value_id"])
    assert len(gone) == 1500, f"{len(gone)} of 1,500 acknowledged records deleted by retention"
