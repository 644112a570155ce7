"""The compose backend's plan: topology, nodes, environment names, the override file (pure)."""
from __future__ import annotations

import pytest
import yaml

from kafkaproof.cluster.compose import env_name, override_yaml, plan_nodes
from kafkaproof.errors import ClusterError
from kafkaproof.spec.cluster import ClusterConfig, compose_topology as topology

pytestmark = pytest.mark.unit


def test_topologies_of_compose_files_and_a_clear_refusal():
    assert topology(2, 0) == "kraft-2-combined" and topology(3, 1) == "kraft-3-brokers-1-controller"
    with pytest.raises(ClusterError, match="no compose file for 5 brokers.*compose/ has: 2 brokers"):
        topology(5, 0)


def test_environment_names_follow_the_apache_kafka_image():
    assert env_name("replica.lag.time.max.ms") == "KAFKA_REPLICA_LAG_TIME_MAX_MS"
    assert env_name("log.flush_interval") == "KAFKA_LOG_FLUSH__INTERVAL"
    assert env_name("a-b.c") == "KAFKA_A___B_C"


def test_nodes_of_brokers_and_a_dedicated_controller():
    nodes = plan_nodes(ClusterConfig(name="c1", brokers=3, controllers=1), "c1", "10.79.7")
    assert [(n["id"], n["service"], n["ip"], n["roles"]) for n in nodes] == [
        (1, "kafka1", "10.79.7.11", ["broker"]), (2, "kafka2", "10.79.7.12", ["broker"]),
        (3, "kafka3", "10.79.7.13", ["broker"]), (101, "controller1", "10.79.7.21", ["controller"])]
    assert nodes[0]["container"] == "c1-kafka1" and nodes[0]["advertised_port"] == 9092
    combined = plan_nodes(ClusterConfig(name="c2", brokers=2), "c2", "10.79.8")
    assert [n["roles"] for n in combined] == [["broker", "controller"]] * 2


def test_override_gives_brokers_the_cluster_settings_and_each_node_its_own():
    config = ClusterConfig(name="c", brokers=3, controllers=1,
                           broker_config={"unclean.leader.election.enable": True, "min.insync.replicas": 1},
                           node_config={2: {"num.io.threads": 2}, 101: {"controller.quorum.election.timeout.ms": 500}})
    services = yaml.safe_load(override_yaml(config, plan_nodes(config, "c", "10.79.1")))["services"]
    assert services["kafka1"]["environment"] == {"KAFKA_MIN_INSYNC_REPLICAS": "1",
                                                 "KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "true"}
    assert services["kafka2"]["environment"]["KAFKA_NUM_IO_THREADS"] == "2"
    assert services["controller1"]["environment"] == {"KAFKA_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS": "500"}


def test_a_scenario_asking_for_a_layout_compose_has_no_file_for_is_refused(tmp_path):
    from kafkaproof.errors import ScenarioError
    from kafkaproof.spec.scenario import load
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "guarantee": "at-least-once", "producers": {"messages": 10},
                                    "cluster": {"brokers": 4, "backend": "compose"}}))
    with pytest.raises(ScenarioError, match=r"cluster.backend: compose: .*no compose file for 4 brokers"):
        load(path)


def test_proxies_front_the_brokers_client_listeners_not_the_controller():
    from kafkaproof.cluster.proxies import front_with_proxies
    nodes = plan_nodes(ClusterConfig(name="c", brokers=3, controllers=1), "c", "10.79.5")
    front_with_proxies(nodes, "127.0.0.1", [41001, 41002, 41003])
    assert [n.get("proxy", {}).get("upstream") for n in nodes] == ["10.79.5.11:9092", "10.79.5.12:9092",
                                                                   "10.79.5.13:9092", None]
    assert (nodes[0]["advertised_host"], nodes[0]["advertised_port"]) == ("127.0.0.1", 41001)
    assert nodes[1]["proxy"]["peers"] == {"1": "127.0.0.1:41001", "3": "127.0.0.1:41003"}
    assert nodes[0]["internal_port"] == 9094  # kafkaproof's own clients stay off the proxies
