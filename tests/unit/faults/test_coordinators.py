"""Coordinator targets (issues 43 and 46; spec/coordinator_targets.py, cluster/coordinators.py): `group_coordinator`,
`share_coordinator[:<group>]` and `txn_coordinator:<copier>` are the leaders of their keys' partitions of
`__consumer_offsets` / `__transaction_state`, computed with Java's String.hashCode like the broker
(GroupCoordinatorService.partitionFor, TransactionStateManager.partitionFor); the run's keys; the scenario's
refusals."""
from __future__ import annotations

import random

import pytest
import yaml

from kafkaproof.cluster.coordinators import find_coordinator, java_string_hash, key_partition
from kafkaproof.errors import ClusterError, FaultError, ScenarioError
from kafkaproof.faults.injector import FaultInjector
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.coordinator_targets import COORDINATOR_TARGETS, parse_target, run_keys
from kafkaproof.spec.fault_families import TARGET_FORMS
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.scenario import validate_document

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, java_hash", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -2 ** 31),            # Integer.MIN_VALUE: Utils.abs makes it 0, not negative
    ("é", 233), ("\U0001D11E", 0xD834 * 31 + 0xDD1E),  # UTF-16 code units: a surrogate pair is two
    ("abcdefghijklmnopqrstuvwxyz", 958031277),    # wraps around 32 bits
])
def test_the_java_hash_of_a_group_id(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_the_partition_of_a_group_id() -> None:
    assert key_partition("polygenelubricants", 50) == 0
    assert key_partition("hello", 50) == 99162322 % 50 == 22
    assert key_partition("abcdefghijklmnopqrstuvwxyz", 1) == 0
    negative = next(g for g in (f"kp-share-group-{i}" for i in range(100)) if java_string_hash(g) < 0)
    assert key_partition(negative, 50) == (-java_string_hash(negative)) % 50  # abs first, then modulo
    with pytest.raises(ValueError):
        key_partition("g", 0)


class _Cluster:
    """Metadata of `__consumer_offsets`: 50 partitions, partition p led by node 1 + p % 3 (none for 22)."""

    name = "c"

    def __init__(self, exists: bool = True) -> None:
        self.exists = exists

    def partitions(self, topic: str) -> dict[int, dict]:
        assert topic == "__consumer_offsets"
        if not self.exists:
            raise ClusterError("topic '__consumer_offsets' not found: absent from metadata")
        return {p: {"leader": -1 if p == 22 else 1 + p % 3, "replicas": [1, 2, 3], "isr": [1, 2, 3]}
                for p in range(50)}

    def node_ids(self) -> list[int]:
        return [1, 2, 3]


def _injector(cluster, keys: dict | None = None) -> FaultInjector:
    injector = object.__new__(FaultInjector)
    injector.cluster, injector.topic, injector.rng = cluster, "orders", random.Random(0)
    injector.coordinator_keys, injector.coordinators = dict(keys or {}), []
    return injector


def test_share_coordinator_resolves_to_the_leader_of_the_groups_partition() -> None:
    group = "kp-share-x"
    partition = key_partition(group, 50)
    injector = _injector(_Cluster(), {"share": group})
    assert injector.resolve("share_coordinator") == [1 + partition % 3]
    assert injector.resolve(f"share_coordinator:{group}") == [1 + partition % 3]
    assert injector.coordinators[-1].as_json() == {"kind": "share_coordinator", "key": group,
                                                   "topic": "__consumer_offsets", "partition": partition,
                                                   "node": 1 + partition % 3}
    assert injector.resolve("share_coordinator:polygenelubricants") == [1]  # partition 0
    with pytest.raises(FaultError, match=r"__consumer_offsets-22 \(the share group's coordinator partition\) has no "
                                         r"leader right now"):
        injector.resolve("share_coordinator:hello")


def test_share_coordinator_without_a_group_or_before_any_group_is_refused() -> None:
    with pytest.raises(FaultError, match="no share group to find the coordinator of: the run has no share section; "
                                         "name one as share_coordinator:<group>"):
        _injector(_Cluster()).resolve("share_coordinator")
    with pytest.raises(FaultError, match="cannot read __consumer_offsets .*it exists once a group has used"):
        find_coordinator(_Cluster(exists=False), COORDINATOR_TARGETS["share_coordinator"], "g")


def test_the_target_forms() -> None:
    assert {"share_coordinator", "share_coordinator:<group>"} <= set(TARGET_FORMS)
    assert parse_target("share_coordinator") == (COORDINATOR_TARGETS["share_coordinator"], None)
    assert parse_target("share_coordinator:my.group-1")[1] == "my.group-1"
    assert parse_target("leader:0") is None and parse_target("share_coordinator:") is None
    FaultSpec("kill", "share_coordinator").validate()
    FaultSpec("lost_ack", "share_coordinator:g", {"api": "share_group_heartbeat"}).validate()
    with pytest.raises(FaultError, match="is not a target"):
        FaultSpec("kill", "share_coordinator:bad group").validate()


SHARE_DOC = {"name": "share-k", "guarantee": "at-least-once", "producers": {"messages": 100},
             "consumers": {"count": 0}, "share": {"consumers": 2}, "claims": {"share_group": {}},
             "faults": [{"at": 2, "kind": "kill", "target": "share_coordinator", "duration": 3}]}


def test_a_scenario_needs_its_share_section_for_the_groupless_form() -> None:
    assert validate_document(SHARE_DOC, "s.yaml")["faults"][0]["target"] == "share_coordinator"
    plain = {k: v for k, v in SHARE_DOC.items() if k not in ("share", "claims")}
    plain["consumers"] = {"count": 1}
    with pytest.raises(ScenarioError, match=r"s.yaml: faults\[0\].target: 'share_coordinator': the share group whose "
                                            r"coordinator it means is the share section's group"):
        validate_document(plain, "s.yaml")
    named = {**plain, "faults": [{"at": 2, "kind": "kill", "target": "share_coordinator:other", "duration": 3}]}
    assert validate_document(named, "s.yaml")["faults"][0]["target"] == "share_coordinator:other"


# --- group_coordinator and txn_coordinator:<copier> (issue 43) -------------------------------------------------

class FakeCluster:
    """Internal topics of `counts` partitions, partition p led by node p % 3 + 1."""
    name = "c"

    def __init__(self, counts):
        self.counts = counts

    def partitions(self, topic):
        if topic not in self.counts:
            raise ClusterError(f"topic {topic!r} not found")
        return {p: {"leader": p % 3 + 1} for p in range(self.counts[topic])}

    def node_ids(self):
        return [1, 2, 3]


def test_the_injector_resolves_group_and_transaction_coordinators():
    cluster = FakeCluster({"__consumer_offsets": 50, "__transaction_state": 7})
    inj = _injector(cluster, {"consumers": "kp-g", "pipeline": ("kp-e-0", "kp-e-1")})
    p = key_partition("kp-g", 50)
    assert inj.resolve("group_coordinator") == [p % 3 + 1]
    assert inj.coordinators[-1].as_json() == {"kind": "group_coordinator", "key": "kp-g",
                                              "topic": "__consumer_offsets", "partition": p, "node": p % 3 + 1}
    p = key_partition("kp-e-1", 7)
    assert inj.resolve("txn_coordinator:1") == [p % 3 + 1]
    assert inj.coordinators[-1].topic == "__transaction_state" and inj.coordinators[-1].key == "kp-e-1"
    with pytest.raises(FaultError, match="copiers 0..1"):
        inj.resolve("txn_coordinator:2")
    with pytest.raises(FaultError, match="no copiers"):
        _injector(cluster).resolve("txn_coordinator:0")
    with pytest.raises(FaultError, match="no consumer group to find the coordinator of"):
        _injector(cluster).resolve("group_coordinator")
    with pytest.raises(FaultError, match="cannot read __transaction_state"):
        _injector(FakeCluster({}), {"pipeline": ("kp-e-0",)}).resolve("txn_coordinator:0")


def test_spec_targets():
    for target in ("txn_coordinator:0", "group_coordinator", "group_coordinator:g-1"):
        for kind in ("kill", "stop", "pause", "isolate"):
            FaultSpec(kind, target).validate()
    for bad in ("txn_coordinator:x", "txn_coordinator"):
        with pytest.raises(FaultError):
            FaultSpec("kill", bad).validate()
        assert parse_target(bad) is None
    assert {"group_coordinator", "txn_coordinator:<copier>"} <= set(TARGET_FORMS)


def test_a_runs_keys_from_its_scenario():
    data = {"consumers": {"group": "kp-s"}, "pipeline": {"copiers": 2, "transactional_id_prefix": "kp-s"},
            "share": {"group": "kp-share-s"}}
    assert run_keys(data) == {"consumers": "kp-s", "share": "kp-share-s", "pipeline": ("kp-s-0", "kp-s-1")}
    assert run_keys({"consumers": {"count": 0}}) == {}


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
