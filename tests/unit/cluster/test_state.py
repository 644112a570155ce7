"""The cluster state file: typed (`ClusterState`), read and written by cluster/state.py only, in the format every
earlier kafkaproof wrote (a crashed run's state file is read by `cluster down --all` of a newer one)."""
from __future__ import annotations

import json

import pytest

from kafkaproof.cluster import state
from kafkaproof.cluster.backend import BACKENDS
from kafkaproof.cluster.capabilities import FaultProxies, FaultyDisks, NodeClocks, NodeProcesses
from kafkaproof.cluster.disks import DiskFleet
from kafkaproof.cluster.base import StatefulCluster
from kafkaproof.cluster.process import ProcessRef
from kafkaproof.cluster.proxies import ProxyFleet
from kafkaproof.cluster.state import ClusterState, NodeState
from kafkaproof.cluster.views import KafkaViews
from kafkaproof.spec.cluster import NodeLink

pytestmark = pytest.mark.unit

# A local cluster's state file as kafkaproof wrote it before the state was typed (a rolled node, a kept
# cluster of a pipeline, a proxy, a disk, a fault).
OLD_LOCAL = {
    "name": "af-0123456789", "slot": 3, "cluster_id": "abc", "network": "netns", "kafka_version": "4.1.0",
    "kafka_libs": "/cache/kafka/4.1.0/libs", "kafka_source": "maven", "heap": "512m", "jit": "quick", "proxy": True,
    "clock": False, "disk": True, "config": {"brokers": 1, "controllers": 0, "broker_config": {}, "node_config": {}},
    "nodes": [{"id": 1, "roles": ["broker", "controller"], "host": "10.77.3.2", "client_port": 9092,
               "controller_port": 9093, "internal_port": 9094, "advertised_host": "10.77.3.1", "advertised_port": 9092,
               "link": {"namespace": "kp3n1", "veth_host": "kp3n1h", "host_ip": "10.77.3.1", "node_ip": "10.77.3.2"},
               "process": {"pid": 4242, "start_ticks": 99}, "status": "running",
               "proxy": {"listen": "10.77.3.1:9092", "upstream": "10.77.3.2:9092",
                         "process": {"pid": 4243, "start_ticks": 100}, "control": "/run/x.sock"},
               "disk": {"process": {"pid": 4244, "start_ticks": 101}, "control": None},
               "kafka_version": "4.1.1", "settings": {"x": 1}, "kafka_libs": "/l", "kafka_source": "maven"}],
    "faults": [{"fault_id": "kill-1", "kind": "kill", "heal": {"restart": [1]}}], "created_wall": 1.5,
    "rolled": True, "kept": {"at": 7.5}, "reuse": {"reused": False, "runs_before": []}, "runs": ["a"],
    "owner": {"batch": "nightly/1", "pid": 1}}


def test_an_older_state_file_loads_typed_and_is_written_back_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    state.cluster_dir("af-0123456789").mkdir(parents=True)
    state.state_path("af-0123456789").write_text(json.dumps(OLD_LOCAL))
    st = state.load_state("af-0123456789")
    node = st.node(1)
    assert (st.slot, st.kept_at, st.rolled, st.runs, st.owner["batch"]) == (3, 7.5, True, ["a"], "nightly/1")
    assert node.link == NodeLink("kp3n1", "kp3n1h", "10.77.3.1", "10.77.3.2") and node.process == ProcessRef(4242, 99)
    assert node.proxy.process == ProcessRef(4243, 100) and node.disk.control is None
    assert st.node_version(node) == "4.1.1" and node.advertised == "10.77.3.1:9092" and node.is_controller
    assert {**st.to_json(), "backend": None} == {**OLD_LOCAL, "backend": None}
    with state.update_state("af-0123456789") as st:
        st.kept_at = None
    assert "kept" not in json.loads(state.state_path("af-0123456789").read_text())


def test_a_minimal_or_unknown_state_file_gets_defaults_and_keeps_what_it_does_not_know():
    st = ClusterState.from_json({"name": "x", "later": {"a": 1}, "nodes": [{"id": 2, "roles": ["broker"], "new": 1}]})
    assert (st.backend, st.heap, st.jit, st.faults, st.kept_at, st.slot) == ("local", "512m", "full", [], None, None)
    assert st.to_json()["later"] == {"a": 1} and st.to_json()["nodes"][0]["new"] == 1
    assert NodeState.from_json(st.to_json()["nodes"][0]) == st.nodes[0]


def test_every_backend_provides_what_its_mixins_rely_on():
    """The mixins declare what they need of the class they are mixed into (annotations); every backend has it,
    as a method or property of its class or an attribute `StatefulCluster.__init__` sets."""
    instance = set(StatefulCluster.__annotations__)
    for name, cls in BACKENDS.items():
        for mixin in (KafkaViews, ProxyFleet, DiskFleet):
            if not issubclass(cls, mixin):
                continue
            missing = [a for a in mixin.__annotations__ if not hasattr(cls, a) and a not in instance]
            assert not missing, f"the {name} backend lacks {missing}, which {mixin.__name__} relies on"


def _save(name: str, **fields) -> None:
    node = {"id": 1, "roles": ["broker", "controller"], "host": "127.0.0.1", "client_port": 1,
            "advertised_host": "127.0.0.1", "advertised_port": 1}
    if fields.get("proxy"):
        node["proxy"] = {"listen": "127.0.0.2:1", "upstream": "127.0.0.1:1"}
    state.save_state(name, ClusterState.from_json({"name": name, "nodes": [node], "kafka_libs": "/l", **fields}))


@pytest.mark.parametrize("backend, fields, present", [
    ("local", {}, {"nodes"}),
    ("local", {"proxy": True, "clock": True, "disk": True}, {"nodes", "proxies", "clock", "disks"}),
    ("compose", {"proxy": True}, {"nodes", "proxies"}),
    ("external", {}, set()),
    ("external", {"proxy": True, "bootstrap": "kafka-a:9092"}, {"proxies"}),
    ("attached", {"bootstrap": "localhost:9092"}, {"nodes"}),
])
def test_capabilities_are_present_or_none_never_raising(tmp_path, monkeypatch, backend, fields, present):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    _save("cap", backend=backend, **fields)
    cluster = BACKENDS[backend]("cap")
    kinds = {"nodes": NodeProcesses, "proxies": FaultProxies, "disks": FaultyDisks, "clock": NodeClocks}
    for capability, protocol in kinds.items():
        value = getattr(cluster, capability)
        assert (value is not None) == (capability in present), capability
        assert value is None or isinstance(value, protocol)
    if backend == "external":  # what kafkaproof does not own is absent, not a method that raises
        assert not hasattr(cluster, "stop_node") and not hasattr(cluster, "set_clock_offsets")
        assert cluster.disk_state(1) == "none" and cluster.node_incarnation(1) is None


def test_every_planner_s_nodes_survive_the_round_trip_unchanged():
    """What `spec.cluster.plan_nodes` (roles as Kafka's `process.roles` string), the compose and the external
    planners write is what a `NodeState` reads and writes back, and its roles answer alike."""
    from kafkaproof.cluster.compose import plan_nodes as compose_nodes
    from kafkaproof.cluster.external import plan_proxied_nodes
    from kafkaproof.spec.cluster import ClusterConfig, plan_nodes
    config = ClusterConfig(name="rt", brokers=3, controllers=1, proxy=True)
    plans = [plan_nodes(config, 5, True), plan_nodes(config, 5, False), compose_nodes(config, "rt-x", "10.79.5"),
             plan_proxied_nodes({1: ("kafka-a", 9092), 2: ("kafka-b", 9092)}, "127.0.0.1", [41001, 41002])]
    for plan in plans:
        nodes = [NodeState.from_json(n) for n in plan]
        # a compose node never had a process: it is written as null (every kafkaproof reads that as none)
        assert [n.to_json() for n in nodes] == [{"process": None, **n} for n in plan]
        assert [n.is_broker for n in nodes] == ["broker" in n["roles"] for n in plan]
        assert [n.is_controller for n in nodes] == ["controller" in n["roles"] for n in plan]


@pytest.mark.parametrize("backend", ["local", "compose", "external"])
def test_a_state_survives_the_round_trip_whatever_its_backend(backend):
    layout = {"brokers": 3, "controllers": 0, "broker_config": {}, "node_config": {}}
    st = ClusterState(name="rt", backend=backend, config=layout if backend != "external" else {}, kafka_version="4.1.0",
                      nodes=[NodeState(id=1, roles=["broker"], host="h", client_port=1)], rolled=True, kept_at=2.0)
    assert ClusterState.from_json(json.loads(json.dumps(st.to_json()))) == st
