"""Cluster reuse between scenarios of a batch: only a cluster shown clean is reused, and the run says so."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof import pipeline
from kafkaproof.cluster import attach, state
from kafkaproof.cluster.reuse import shared_cluster_name
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

pytestmark = pytest.mark.cluster

BATCH = "test-reuse/1"


def scenario(tmp_path: Path, name: str, **overrides):
    doc = {"name": name, "guarantee": "at-least-once",
           "cluster": {"brokers": 3, "config": {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
                                                "broker.heartbeat.interval.ms": 1000}},
           "topic": {"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 400, "messages": 1500, "start_after_s": 1,
                         "config": {"acks": "all", "enable.idempotence": True}},
           "consumers": {"count": 1, "commit": "sync",
                         "config": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}}}
    doc.update(overrides)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return resolve(load(path))


@pytest.fixture
def cleanup():
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(Exception):
            pipeline.teardown(name)


def run_on(scn, name: str, out: Path) -> tuple[dict, Path]:
    result = pipeline.run(scn, out=str(out), cluster_name=name)
    assert result["status"] == "complete", result["error"]
    return ledger.read_manifest(Path(result["run_dir"])), Path(result["run_dir"])


@pytest.mark.long
def test_a_kept_cluster_is_reused_only_when_nothing_of_the_earlier_run_is_left(tmp_path, cleanup):
    first = scenario(tmp_path, "t-reuse-a", faults=[{"at": 3, "kind": "kill", "target": "consumer:0", "duration": 1},
                                                   {"at": 4, "kind": "kill", "target": "leader:0", "duration": 3}])
    second, third = scenario(tmp_path, "t-reuse-b"), scenario(tmp_path, "t-reuse-c")
    name = shared_cluster_name(BATCH, first.cluster_key)
    assert name == shared_cluster_name(BATCH, second.cluster_key) == \
        shared_cluster_name(BATCH, third.cluster_key)
    cleanup.append(name)

    assert pipeline.provision(first, name, reuse=True)["reused"] is False
    cluster_id = attach(name).state().cluster_id
    manifest, _ = run_on(first, name, tmp_path / "runs")
    assert manifest["cluster_reuse"] == {"reused": False, "runs_before": []}
    pipeline.teardown(name, keep=True)
    assert state.load_state(name).kept_at

    # a leader killed and restarted, a consumer killed: all healed, so the cluster is reused
    assert pipeline.provision(second, name, reuse=True)["reused"] is True
    assert attach(name).state().cluster_id == cluster_id
    manifest, run_dir = run_on(second, name, tmp_path / "runs")
    reuse = manifest["cluster_reuse"]
    assert reuse["reused"] and reuse["runs_before"] == ["t-reuse-a"]
    assert reuse["leftovers"]["not_in_sync"] == [] and reuse["leftovers"]["partitions"] >= 2
    sends = pq.read_table(ledger.table_path(run_dir, "sends")).to_pandas()
    reads = pq.read_table(ledger.table_path(run_dir, "reads")).to_pandas()
    assert len(sends) == 1500 and set(sends["outcome"]) == {"ok"} and set(reads["value_id"]) == set(sends["value_id"])
    node_log = (run_dir / "logs" / "node-1.log").read_text(errors="replace")
    assert "kp-t-reuse-b" in node_log and "kp-t-reuse-a" not in node_log  # only this run's lines
    pipeline.teardown(name, keep=True)

    # something left behind (a node down): a fresh cluster instead
    attach(name).stop_node(2)
    assert pipeline.provision(third, name, reuse=True)["reused"] is False
    assert attach(name).state().cluster_id != cluster_id
    pipeline.teardown(name, keep=True)

    # a scenario asking for another cluster takes down the one kept idle
    other = scenario(tmp_path, "t-reuse-d", cluster={"brokers": 1}, topic={"partitions": 1, "replication_factor": 1})
    other_name = shared_cluster_name(BATCH, other.cluster_key)
    cleanup.append(other_name)
    assert other_name != name
    pipeline.provision(other, other_name, reuse=True)
    assert name not in state.list_clusters() and other_name in state.list_clusters()
