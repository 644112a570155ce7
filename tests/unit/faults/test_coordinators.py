"""Coordinator fault targets (faults/coordinators.py, spec/coordinator_targets.py): Kafka's key → partition hash,
the keys a run's targets stand for, the injector's resolution, and the scenario's refusals."""
from __future__ import annotations

import pytest
import yaml

from kafkaproof.errors import ClusterError, FaultError, ScenarioError
from kafkaproof.faults import coordinators as co
from kafkaproof.faults.injector import FaultInjector
from kafkaproof.run.copier_run import coordinator_keys
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.faults import FaultSpec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("key, expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("hello world", 1794106052), ("kp-eos-0", None),
    ("polygenelubricants", -2**31),  # Java's Integer.MIN_VALUE hash
    ("é€", 0xE9 * 31 + 0x20AC), ("😀", 0xD83D * 31 + 0xDE00),  # UTF-16 code units, a surrogate pair
])
def test_java_string_hash(key, expected):
    h = co.java_string_hash(key)
    assert -2**31 <= h < 2**31
    if expected is not None:
        assert h == expected


def test_key_partition_is_kafkas():
    assert co.key_partition("hello", 50) == 99162322 % 50
    assert co.key_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    neg = next(k for k in (f"{i}-kp-transactional" for i in range(1000)) if co.java_string_hash(k) < 0)
    assert co.key_partition(neg, 7) == abs(co.java_string_hash(neg)) % 7
    with pytest.raises(ValueError):
        co.key_partition("x", 0)


class FakeCluster:
    def __init__(self, counts):
        self.counts = counts
        self.asked = []

    def partitions(self, topic):
        if topic not in self.counts:
            raise ClusterError(f"topic {topic!r} not found")
        return {p: {"leader": p % 3 + 1} for p in range(self.counts[topic])}

    def leader_of(self, topic, partition):
        self.asked.append((topic, partition))
        return partition % 3 + 1

    def node_ids(self):
        return [1, 2, 3]


def test_keys_of_a_run_and_their_partitions():
    keys = co.CoordinatorKeys(group="kp-g", transactional_ids=("kp-e-0", "kp-e-1"))
    assert keys.key_of("group_coordinator") == ("__consumer_offsets", "kp-g")
    assert keys.key_of("txn_coordinator:1") == ("__transaction_state", "kp-e-1")
    cluster = FakeCluster({"__consumer_offsets": 50, "__transaction_state": 7})
    assert keys.partition_of(cluster, "txn_coordinator:0") == ("__transaction_state", co.key_partition("kp-e-0", 7))
    with pytest.raises(FaultError, match="copiers 0..1"):
        keys.key_of("txn_coordinator:2")
    with pytest.raises(FaultError, match="no consumer group"):
        co.CoordinatorKeys().key_of("group_coordinator")
    with pytest.raises(FaultError, match="__transaction_state cannot be read yet"):
        keys.partition_of(FakeCluster({}), "txn_coordinator:0")
    assert co.is_coordinator_target("txn_coordinator:3") and co.is_coordinator_target("group_coordinator")
    assert not co.is_coordinator_target("controller")


def test_the_injector_resolves_coordinator_targets(tmp_path, monkeypatch):
    monkeypatch.setattr("kafkaproof.faults.injector.cluster_fault_log", lambda c: tmp_path / "f.log")
    cluster = FakeCluster({"__consumer_offsets": 50, "__transaction_state": 50})
    keys = co.CoordinatorKeys(group="kp-g", transactional_ids=("kp-e-0",))
    inj = FaultInjector(cluster, "t", coordinators=keys)
    p = co.key_partition("kp-g", 50)
    assert inj.resolve("group_coordinator") == [p % 3 + 1] and cluster.asked == [("__consumer_offsets", p)]
    p = co.key_partition("kp-e-0", 50)
    assert inj.resolve("txn_coordinator:0") == [p % 3 + 1]
    with pytest.raises(FaultError, match="needs the keys of a scenario run"):
        FaultInjector(cluster, "t").resolve("group_coordinator")


def test_spec_targets():
    for target in ("txn_coordinator:0", "group_coordinator"):
        for kind in ("kill", "stop", "pause", "isolate"):
            FaultSpec(kind, target).validate()
    with pytest.raises(FaultError):
        FaultSpec("kill", "txn_coordinator:x").validate()


def test_a_runs_keys_from_its_scenario():
    data = {"consumers": {"group": "kp-s"}, "pipeline": {"copiers": 2, "transactional_id_prefix": "kp-s"}}
    assert coordinator_keys(data) == co.CoordinatorKeys("kp-s", ("kp-s-0", "kp-s-1"))
    assert coordinator_keys({"consumers": {"count": 0}}) == co.CoordinatorKeys(None, ())


BASE = {"name": "c", "guarantee": "at-least-once", "producers": {"messages": 10}}


@pytest.mark.parametrize("doc, message", [
    ({"faults": [{"at": 1, "kind": "kill", "target": "txn_coordinator:0"}]}, "needs a pipeline section"),
    ({"pipeline": {"copiers": 2}, "faults": [{"at": 1, "kind": "kill", "target": "txn_coordinator:2"}]},
     "copiers are txn_coordinator:0..txn_coordinator:1"),
    ({"consumers": {"count": 0}, "faults": [{"at": 1, "kind": "stop", "target": "group_coordinator"}]},
     "needs consumers in a group"),
    ({"consumers": {"mode": "assign"}, "faults": [{"at": 1, "kind": "pause", "target": "group_coordinator"}]},
     "needs consumers in a group"),
])
def test_scenario_refusals_name_the_fault(tmp_path, doc, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, **doc}))
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(path)
    assert "faults[0].target" in str(e.value) and message in str(e.value)


def test_scenarios_with_coordinator_targets_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "pipeline": {"copiers": 2}, "faults": [
        {"at": 1, "kind": "kill", "target": "txn_coordinator:1", "duration": 2},
        {"at": 5, "kind": "isolate", "target": "group_coordinator", "duration": 2}]}))
    s = scenario_mod.load(path)
    assert [e.spec.target for e in s.timeline()] == ["txn_coordinator:1", "group_coordinator"]
