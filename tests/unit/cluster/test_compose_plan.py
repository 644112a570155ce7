"""The compose backend's plan: topology, nodes, environment names, the override file (pure)."""
from __future__ import annotations

import pytest
import yaml

from kafkaproof.cluster import network
from kafkaproof.cluster.compose import (compose_model_problems, env_name, network_faults_mode, override_yaml,
                                        plan_nodes)
from kafkaproof.errors import ClusterError, FaultError
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


def test_network_faults_enter_containers_by_namespace_here_and_through_the_engine_elsewhere():
    assert network_faults_mode("auto", engine_is_local=True, can_netns=True) == "netns"
    assert network_faults_mode("auto", engine_is_local=False, can_netns=True) == "engine"
    assert network_faults_mode("auto", engine_is_local=True, can_netns=False) == "engine"
    assert network_faults_mode("engine", engine_is_local=True, can_netns=True) == "engine"
    with pytest.raises(ClusterError, match="netns needs root and the Docker engine on this machine.*elsewhere"):
        network_faults_mode("netns", engine_is_local=False, can_netns=True)
    with pytest.raises(ClusterError, match="KAFKAPROOF_COMPOSE_NETWORK_FAULTS='docker': allowed auto, netns, engine"):
        network_faults_mode("docker", engine_is_local=True, can_netns=True)


def test_a_container_namespace_is_entered_by_a_tools_container_on_the_cluster_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2375")
    monkeypatch.setenv("KAFKAPROOF_TOOLS_IMAGE", "nicolaka/netshoot")
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    prefix = network.netns_prefix("docker:kp-e1-kafka2")
    assert prefix[1:] == ["-H", "tcp://10.0.0.5:2375", "run", "--rm", "-i", "--network", "container:kp-e1-kafka2",
                          "--cap-add", "NET_ADMIN", "--label", "io.kafkaproof.tool=netns",
                          "--label", "io.kafkaproof.target=kp-e1-kafka2", "--entrypoint", "", "nicolaka/netshoot"]
    assert network.netns_prefix("kp3n1") == ["ip", "netns", "exec", "kp3n1"]
    link = network.NodeLink(namespace="docker:kp-e1-kafka2", veth_host="", host_ip="10.79.1.1", node_ip="10.79.1.12")
    assert network._tc_ends(link, "qdisc", "show") == [prefix + ["tc", "qdisc", "show", "dev", "eth0"]]  # its own end
    with pytest.raises(FaultError, match="not a kafkaproof namespace"):
        network._check_name("docker:../etc")


def test_a_users_compose_file_is_checked_against_the_conventions_field_by_field():
    nodes = plan_nodes(ClusterConfig(name="kp-e1", brokers=2, backend="compose"), "kp-e1", "10.79.3")
    good = {"services": {n["service"]: {"container_name": n["container"], "labels": {"io.kafkaproof.cluster": "kp-e1"},
                                        "networks": {"kafka": {"ipv4_address": n["ip"]}}} for n in nodes},
            "networks": {"kafka": {"labels": {"io.kafkaproof.cluster": "kp-e1"}}},
            "volumes": {"kafka1-data": {"labels": {"io.kafkaproof.cluster": "kp-e1"}}, "shared": {"external": True}}}
    assert compose_model_problems(good, nodes, "kp-e1") == []
    bad = {"services": {"kafka1": {"container_name": "broker-1", "networks": {"default": None},
                                   "labels": {"io.kafkaproof.cluster": "kp-e1"}}},
           "networks": {"kafka": {}}}
    assert compose_model_problems(bad, nodes, "kp-e1") == [
        "services.kafka1.container_name: 'broker-1', must be '${KAFKAPROOF_CLUSTER}-kafka1' ('kp-e1-kafka1' here)",
        "services.kafka1.networks: no ipv4_address 10.79.3.11 ('${KAFKAPROOF_NET_PREFIX}.11'); found [None]",
        "services.kafka2: missing (node 2; this topology needs services kafka1, kafka2)",
        "networks.kafka.labels: needs io.kafkaproof.cluster: ${KAFKAPROOF_CLUSTER} ('kp-e1' here), or `cluster down` "
        "could not find it"]
