"""Fast tests of the cluster backend's pure parts and of input validation (no brokers)."""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaproof.cluster import ClusterConfig, network
from kafkaproof.spec.cluster import (BROKER_GRACE_S, CONTROLLER_GRACE_S, node_properties, plan_link, plan_nodes,
                                     routed_slots, shutdown_waves)
from kafkaproof.errors import ClusterError, FaultError, InstallError
from kafkaproof.faults.network_rules import packet_loss_rules, partition_rules, resolve_partition_groups
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.versions import check_version
from kafkaproof.spec.ledger import decode_value_id, encode_payload, make_value_id, split_value_id

pytestmark = pytest.mark.unit


def kafkaproof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaproof", *args], capture_output=True, text=True, timeout=60)


def test_link_layout_gives_each_node_its_own_address():
    links = [plan_link(3, i, nid) for i, nid in enumerate([1, 2, 3])]
    assert [l.node_ip for l in links] == ["10.77.3.2", "10.77.3.6", "10.77.3.10"]
    assert [l.host_ip for l in links] == ["10.77.3.1", "10.77.3.5", "10.77.3.9"]
    assert links[0].namespace == "kp3n1" and links[0].veth_host == "kp3n1h"
    assert all(len(l.veth_host) <= 15 for l in links)


def test_a_slot_whose_subnet_this_host_routes_is_taken():
    """A leftover bridge's /24, a local node's /30 or a single host route inside a slot's subnet takes the
    slot; the default route, a wider route (a VPN's 10.0.0.0/8) and other ranges do not."""
    destinations = ["default", "10.0.0.0/8", "192.0.2.0/24", "10.79.1.0/24", "10.77.4.8/30", "10.79.7.1",
                    "10.78.13.0/24", "10.79.0.0/16", "not-an-address"]
    assert routed_slots(destinations) == {1, 4, 7}
    assert routed_slots(["default"]) == set()


def test_combined_and_dedicated_controller_properties(tmp_path: Path):
    cfg = ClusterConfig(brokers=3, controllers=0, broker_config={"unclean.leader.election.enable": True})
    nodes = plan_nodes(cfg, 1, use_netns=True)
    props = node_properties(cfg, nodes[0], nodes, tmp_path, kafka_major=4)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@10.77.1.2:9093,2@10.77.1.6:9093,3@10.77.1.10:9093"
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["unclean.leader.election.enable"] is True
    assert props["transaction.state.log.min.isr"] == 2

    cfg2 = ClusterConfig(brokers=3, controllers=1)
    nodes2 = plan_nodes(cfg2, 1, use_netns=True)
    ctl = node_properties(cfg2, nodes2[3], nodes2, tmp_path, kafka_major=4)
    assert ctl["process.roles"] == "controller" and ctl["node.id"] == 101
    assert "CLIENT" not in ctl["listeners"]
    broker = node_properties(cfg2, nodes2[0], nodes2, tmp_path, kafka_major=4)
    assert broker["controller.quorum.voters"] == "101@10.77.1.14:9093"


@pytest.mark.parametrize("kwargs, message", [
    ({"brokers": 0}, "brokers must be an integer from 1 to 9"),
    ({"controllers": 9}, "controllers must be 0"),
    ({"name": "Bad Name"}, "cluster name 'Bad Name' is invalid"),
    ({"node_config": {7: {"x": 1}}}, "node_config names node 7"),
    ({"jit": "c2"}, "jit must be one of quick, full, got 'c2'"),
])
def test_cluster_config_errors(kwargs, message):
    with pytest.raises(ClusterError, match=message):
        ClusterConfig(**kwargs).validate()


def test_unsupported_kafka_version():
    with pytest.raises(InstallError, match="not supported"):
        check_version("2.8.0")


@pytest.mark.parametrize("spec, message", [
    (FaultSpec("explode", "node:1"), "unknown fault kind 'explode'; allowed: kill, stop"),
    (FaultSpec("kill", "leaderr:0"), "is not a target; allowed forms: node:<id>"),
    (FaultSpec("packet_loss", "node:1"), "params.percent: required"),
    (FaultSpec("packet_loss", "node:1", {"percent": 150}), "must be in \\(0, 100\\]"),
    (FaultSpec("bandwidth", "node:1", {"rate_kbit": "fast"}), "expected int"),
    (FaultSpec("kill", "node:1", {"force": True}), "params.force: not a parameter of kill"),
    (FaultSpec("partition", params={"groups": [[1], [1, 2]]}), "a node appears in two groups"),
    (FaultSpec("partition", params={"groups": "triangle"}), "unknown partition shape"),
    (FaultSpec("partition", "node:1", {"groups": "bridge"}), "takes no target"),
])
def test_fault_spec_errors_name_the_field_and_what_is_allowed(spec, message):
    with pytest.raises(FaultError, match=message):
        spec.validate()


def test_partition_shapes():
    rng = random.Random(1)
    assert resolve_partition_groups("leader-minority:0", [1, 2, 3], leader=2) == [[2], [1, 3]]
    mm = resolve_partition_groups("majority-minority", [1, 2, 3, 4, 5], rng=rng)
    assert sorted(len(g) for g in mm) == [2, 3] and sorted(sum(mm, [])) == [1, 2, 3, 4, 5]
    a, b, bridge = resolve_partition_groups("bridge", [1, 2, 3, 4, 5], rng=rng)
    assert len(bridge) == 1 and len(a) + len(b) == 4
    with pytest.raises(FaultError, match="nodes \\[9\\]"):
        resolve_partition_groups([[1], [9]], [1, 2, 3])


def test_partition_rules_cut_only_across_groups():
    ips = {1: "10.77.1.2", 2: "10.77.1.6", 3: "10.77.1.10"}
    rules = partition_rules([[1], [2, 3]], ips)
    assert rules[1] == (["ip saddr { 10.77.1.6, 10.77.1.10 } drop"], ["ip daddr { 10.77.1.6, 10.77.1.10 } drop"])
    assert rules[2][0] == ["ip saddr { 10.77.1.2 } drop"]
    bridged = partition_rules([[1], [2], [3]], ips, bridge=True)
    assert 3 not in bridged and bridged[1][0] == ["ip saddr { 10.77.1.6 } drop"]


def test_packet_loss_uses_numgen():
    inp, out = packet_loss_rules(12.5)
    assert inp == ['iifname "eth0" numgen random mod 10000 < 1250 drop']


def test_nft_ruleset_refuses_foreign_table_names():
    with pytest.raises(FaultError):
        network.nft_ruleset("filter", [], [])
    with pytest.raises(FaultError, match="not a kafkaproof namespace"):
        network.nft_delete_table("docker0", "kp_x")


def test_value_ids_and_payloads_round_trip():
    vid = make_value_id(3, 12345)
    assert split_value_id(vid) == (3, 12345)
    payload = encode_payload("run1", vid, 100)
    assert len(payload) == 100
    assert decode_value_id(payload) == vid
    assert decode_value_id(payload, run_id="other") == -1
    assert decode_value_id(b"hello") == -1


def test_cli_bad_input_before_anything_starts(tmp_path, monkeypatch):
    r = kafkaproof("cluster", "up", "--brokers", "0")
    assert r.returncode == 2 and "--brokers: must be at least 1, got 0" in r.stderr
    env_state = {"KAFKAPROOF_STATE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "fault", "inject", "kill", "--target", "node:1",
                        "--name", "nosuch"], capture_output=True, text=True, env={**__import__("os").environ, **env_state})
    assert r.returncode == 2 and "no cluster named 'nosuch' is running" in r.stderr
    r = kafkaproof("fault", "inject", "explode", "--target", "node:1")
    assert r.returncode == 2 and "unknown fault kind 'explode'" in r.stderr
    r = kafkaproof("cluster", "up", "--config", "novalue")
    assert r.returncode == 2 and "expected key=value" in r.stderr


def test_create_topic_asks_again_after_a_local_client_error():
    from concurrent.futures import Future

    from confluent_kafka import KafkaError, KafkaException

    from kafkaproof.cluster import LocalCluster
    from kafkaproof.cluster.views import kafka_error_name

    def failing(code):
        f = Future()
        f.set_exception(KafkaException(KafkaError(code)))
        return f

    class Admin:
        def __init__(self, answers):
            self.answers, self.calls = list(answers), 0

        def create_topics(self, new_topics, request_timeout):
            self.calls += 1
            return {new_topics[0].topic: self.answers.pop(0)}

    cluster = object.__new__(LocalCluster)
    cluster.partitions = lambda topic: {0: {"leader": 1}}
    # the first request was retired with its broker handle; the retry finds the topic the first one created
    cluster._admin = Admin([failing(KafkaError._DESTROY_BROKER), failing(KafkaError.TOPIC_ALREADY_EXISTS)])
    cluster.admin = lambda: cluster._admin
    cluster.create_topic("t", 1, 1, timeout_s=5)
    assert cluster._admin.calls == 2
    # a broker's refusal is not retried, and "already exists" on a first attempt is an error
    cluster._admin = Admin([failing(KafkaError.TOPIC_ALREADY_EXISTS)])
    with pytest.raises(ClusterError, match="TOPIC_ALREADY_EXISTS"):
        cluster.create_topic("t", 1, 1, timeout_s=5)
    assert cluster._admin.calls == 1
    assert kafka_error_name(ValueError("x")) is None


def test_drop_rules_count_what_they_drop():
    script = network.nft_ruleset("kp_x", ["ip saddr { 10.77.1.6 } drop"], ['oifname "eth0" numgen random mod 10000 < 1250 drop'])
    assert "ip saddr { 10.77.1.6 } counter drop" in script
    assert 'numgen random mod 10000 < 1250 counter drop' in script
    doc = {"nftables": [{"metainfo": {}}, {"table": {"name": "kp_x"}},
                        {"rule": {"expr": [{"match": {}}, {"counter": {"packets": 7, "bytes": 700}}, {"drop": None}]}},
                        {"rule": {"expr": [{"counter": {"packets": 3, "bytes": 30}}, {"drop": None}]}}]}
    import json
    assert network.counters_from_json(json.dumps(doc)) == {"packets": 10, "bytes": 730}


def test_token_bucket_stats():
    import json
    doc = [{"kind": "tbf", "overlimits": 40, "drops": 2}, {"kind": "noqueue", "overlimits": 99, "drops": 9}]
    assert network.qdisc_stats_from_json(json.dumps(doc)) == {"overlimits": 40, "dropped": 2}


def test_leader_and_follower_targets_resolve_from_the_partition_metadata():
    from kafkaproof.cluster.views import KafkaViews
    from kafkaproof.faults.injector import FaultInjector

    class Cluster(KafkaViews):
        name = "c"

        def partitions(self, topic):
            return {0: {"leader": 2, "replicas": [1, 2, 3], "isr": [1, 2, 3]}, 1: {"leader": 1, "replicas": [1]}}

        def node_state(self, node_id):
            return "dead" if node_id == 1 else "running"

        def node_ids(self):
            return [1, 2, 3]

    injector = object.__new__(FaultInjector)
    injector.cluster, injector.topic, injector.rng = Cluster(), "orders", random.Random(0)
    assert injector.resolve("leader:0") == [2]
    assert injector.resolve("followers:0") == [1, 3] == injector.resolve("followers:orders:0")
    assert injector.resolve("follower:0") == [3]  # a live follower first
    with pytest.raises(FaultError, match="orders-1 has no follower"):
        injector.resolve("followers:1")
    FaultSpec("isolate", "followers:0").validate()


def test_brokers_stop_before_the_controllers_they_need():
    nodes = [{"id": 1, "roles": "controller"}, {"id": 2, "roles": "broker"}, {"id": 3, "roles": "broker"}]
    assert [[n["id"] for n in w] for w, _ in shutdown_waves(nodes)] == [[2, 3], [1]]
    combined = [{"id": i, "roles": "broker,controller"} for i in (1, 2, 3)]
    assert [[n["id"] for n in w] for w, _ in shutdown_waves(combined)] == [[1, 2, 3]]
    # The last controller can never finish a controlled shutdown: a short grace.
    assert [grace for _, grace in shutdown_waves(nodes)] == [BROKER_GRACE_S, CONTROLLER_GRACE_S]
    assert CONTROLLER_GRACE_S < BROKER_GRACE_S
    assert shutdown_waves([]) == []
