"""Attaching to a team's compose project, the pure parts: which containers are Kafka nodes, the address
clients use, the metadata check, and the refusals (each naming the container and what is missing)."""
from __future__ import annotations

import pytest

from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster import network
from kafkaproof.cluster.attach_env import ConfigFile, parse_properties
from kafkaproof.cluster.attached import (AttachedCluster, attached_roll_refused, container_networks, engine_link,
                                         is_kafka_env, metadata_problems, plan_attached_nodes, published_ports,
                                         runs_kafka)
from kafkaproof.cluster.proxies import front_with_proxies
from kafkaproof.errors import ClusterError
from kafkaproof.faults.network_rules import partition_rules
from kafkaproof.spec.faults import CLOCK_KINDS, DISK_KINDS, NETWORK_KINDS, PROCESS_KINDS, PROXY_KINDS

from seed_envs import E1_KAFKA, E1_KAFKA2, confluent


def container(name: str, env: dict, ports: dict[int, int], status: str = "running", paused: bool = False) -> dict:
    """`docker inspect` of one container, as much of it as attaching reads."""
    return {"Id": f"id-{name}", "Name": f"/{name}",
            "Config": {"Env": [f"{k}={v}" for k, v in env.items()],
                       "Labels": {"com.docker.compose.project": "p", "com.docker.compose.service": name}},
            "State": {"Status": status, "Running": status == "running", "Paused": paused},
            "NetworkSettings": {"Ports": {f"{c}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(h)},
                                                       {"HostIp": "::", "HostPort": str(h)}]
                                          for c, h in ports.items()} | {"9093/tcp": None},
                                "Networks": {"p_default": {"IPAddress": "172.18.0.2"}}}}


APP = container("signup-app", {"SPRING_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "KAFKA_CLUSTERS_0_NAME": "x"}, {8080: 8080})


def test_the_seeds_bitnami_pair_is_planned_with_published_localhost_addresses():
    nodes = plan_attached_nodes("p", [APP, container("kafka2", E1_KAFKA2, {9092: 9093}),
                                      container("kafka", E1_KAFKA, {9092: 9092})])
    assert [(n["id"], n["container"], n["host"], n["client_port"]) for n in nodes] == [
        (0, "kafka", "localhost", 9092), (1, "kafka2", "localhost", 9093)]
    assert nodes[0]["roles"] == ["controller", "broker"] and nodes[0]["container_id"] == "id-kafka"
    assert nodes[0]["controller_port"] == 9093 and nodes[0]["log_dir"] == "/bitnami/kafka/data"


def test_the_three_confluent_brokers_use_their_external_listener():
    nodes = plan_attached_nodes("p", [container(f"kafka-broker-0{i}", confluent(i), {9092: 9999 + i})
                                      for i in (3, 1, 2)])
    assert [(n["id"], n["listener"], n["advertised_port"]) for n in nodes] == [
        (1, "EXTERNAL", 10000), (2, "EXTERNAL", 10001), (3, "EXTERNAL", 10002)]
    brokers = {1: ("localhost", 10000), 2: ("localhost", 10001), 3: ("localhost", 10002)}
    assert metadata_problems(nodes, brokers) == []
    assert metadata_problems(nodes, {1: ("kafka-broker-01", 29092), 2: brokers[2], 4: ("x", 1)}) == [
        "broker 1 (container kafka-broker-01): metadata names kafka-broker-01:29092, its environment localhost:10000",
        "broker 3 (container kafka-broker-03) is not in the cluster metadata",
        "broker 4 at x:1 is in the metadata but is no container of the project"]


def test_published_ports_and_what_counts_as_a_kafka_container():
    assert published_ports(container("k", {}, {9092: 19092})) == {9092: 19092}
    assert is_kafka_env(E1_KAFKA) and is_kafka_env(confluent(1))
    assert not is_kafka_env({"KAFKA_CLUSTERS_0_NAME": "x", "KAFKA_HEAP_OPTS": "-Xmx1g"})


@pytest.mark.parametrize("containers, words", [
    ([APP], ["project 'p'", "no Kafka broker container"]),
    ([container("kafka", {"KAFKA_PROCESS_ROLES": "broker"}, {9092: 9092})], ["container kafka", "node id"]),
    ([container("kafka", E1_KAFKA, {})], ["container kafka", "no advertised listener", "publish"]),
    ([container("kafka", E1_KAFKA, {9092: 9092}, status="exited")], ["container kafka", "exited", "up -d"]),
    ([container("kafka", E1_KAFKA, {9092: 9092}, paused=True)], ["container kafka", "not running"]),
    ([container("kafka", E1_KAFKA, {9092: 9092}), container("kafka2", E1_KAFKA, {9092: 9092})],
     ["container kafka2", "node id 0", "container kafka's"]),
])
def test_bad_projects_are_refused_before_anything_is_touched(containers, words):
    with pytest.raises(ClusterError) as e:
        plan_attached_nodes("p", containers)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_process_network_and_proxy_faults_are_supported_clock_and_disk_refused_with_the_reason():
    assert AttachedCluster.supported_for() == frozenset(PROCESS_KINDS + NETWORK_KINDS + PROXY_KINDS) | {"rolling_restart"}
    assert not AttachedCluster.supported_for() & (frozenset(CLOCK_KINDS) | frozenset(DISK_KINDS))
    cluster = object.__new__(AttachedCluster)
    cluster._multi_network = lambda: []  # type: ignore[method-assign]
    assert "libfaketime" in cluster.unsupported_reason("clock_skew")
    assert "diskfs" in cluster.unsupported_reason("disk_full")
    assert "rolling_upgrade and settings changes would recreate your service" in cluster.unsupported_reason(
        "rolling_upgrade")


def test_a_container_on_several_networks_gets_no_network_faults_and_says_why(monkeypatch):
    cluster = object.__new__(AttachedCluster)
    monkeypatch.setattr(AttachedCluster, "_multi_network", lambda self: ["kafka (p_back, p_front)"])
    reason = cluster.unsupported_reason("isolate")
    assert "kafka (p_back, p_front)" in reason and "eth0" in reason
    assert "isolate" not in cluster.supported_faults and "kill" in cluster.supported_faults


def test_the_planned_nodes_record_each_containers_address_on_the_project_network():
    two = container("kafka2", E1_KAFKA2, {9092: 9093})
    two["NetworkSettings"]["Networks"] = {"p_default": {"IPAddress": "172.18.0.3"}, "p_other": {"IPAddress": ""}}
    nodes = plan_attached_nodes("p", [container("kafka", E1_KAFKA, {9092: 9092}), two])
    assert [(n["ip"], n["networks"]) for n in nodes] == [("172.18.0.2", ["p_default"]), ("172.18.0.3", ["p_default"])]
    assert container_networks({"NetworkSettings": {"Networks": {"b": {"IPAddress": "10.0.0.2"},
                                                                "a": {"IPAddress": "10.0.1.2"}}}}) == {
        "a": "10.0.1.2", "b": "10.0.0.2"}
    assert container_networks({"State": {"Status": "exited"}, "NetworkSettings": {"Networks": {}}}) == {}


def test_network_faults_enter_the_container_through_a_labelled_tools_container(monkeypatch):
    link = engine_link("shop-kafka-1", "ab12" * 16, "172.18.0.2")
    assert (link.namespace, link.veth_host, link.node_ip) == ("docker:shop-kafka-1", "", "172.18.0.2")
    # a name the namespace convention does not take (upper case): the container id instead
    assert engine_link("Kafka-Broker-01", "AB12" * 16, "172.18.0.4").namespace == "docker:ab12ab12ab12"
    monkeypatch.setattr(de, "engine_url", lambda: "unix:///run/kp.sock")
    monkeypatch.setattr(de, "_docker_binary", lambda: "docker")
    cmd = network.netns_prefix(link.namespace) + ["nft", "list", "tables"]
    assert cmd[:4] == ["docker", "-H", "unix:///run/kp.sock", "run"]
    assert "--rm" in cmd and cmd[cmd.index("--network") + 1] == "container:shop-kafka-1"
    labels = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--label"]
    assert labels == [f"{de.TOOL_LABEL}=netns", f"{de.TOOL_TARGET_LABEL}=shop-kafka-1"]
    assert cmd[-3:] == ["nft", "list", "tables"] and de.tools_image() in cmd


def test_partition_rules_use_the_engines_addresses_of_the_attached_containers():
    ips = {1: "172.18.0.4", 2: "172.18.0.2", 3: "172.18.0.3"}
    rules = partition_rules([[1], [2, 3]], ips)
    assert rules[1] == (["ip saddr { 172.18.0.2, 172.18.0.3 } drop"], ["ip daddr { 172.18.0.2, 172.18.0.3 } drop"])
    assert rules[2] == (["ip saddr { 172.18.0.4 } drop"], ["ip daddr { 172.18.0.4 } drop"])


def test_the_proxies_front_the_published_ports_and_know_their_peers():
    nodes = plan_attached_nodes("p", [container(f"kafka-broker-0{i}", confluent(i), {9092: 9999 + i}) for i in (1, 2)])
    front_with_proxies(nodes, "127.0.0.1", [41001, 41002])
    assert [(n["advertised_host"], n["advertised_port"], n["proxy"]["upstream"]) for n in nodes] == [
        ("127.0.0.1", 41001, "localhost:10000"), ("127.0.0.1", 41002, "localhost:10001")]
    assert nodes[0]["proxy"]["peers"] == {"2": "127.0.0.1:41002"} and nodes[0]["proxy"]["rewrite"]
def test_rolls_onto_another_version_or_settings_are_refused_on_an_attached_project_with_the_reason():
    assert attached_roll_refused(None, {}) is None  # a plain rolling restart: each container in place
    assert "onto Kafka 4.3.1 would mean recreating your service" in attached_roll_refused("4.3.1", {})
    assert "settings {'num.io.threads': 4}" in attached_roll_refused(None, {"num.io.threads": 4})
    assert AttachedCluster.roll_refused(object.__new__(AttachedCluster), None, {}) is None


def test_a_container_configured_by_its_own_config_file_is_planned_from_that_file():
    team = container("broker-a", {"KAFKA_HEAP_OPTS": "-Xmx1g"}, {9092: 19092})
    team["Path"], team["Args"] = "/opt/team/start.sh", ["kafka-server-start.sh", "/etc/team/server.properties"]
    asked = []

    def read_config(name: str) -> ConfigFile:
        asked.append(name)
        if name == "kafka":  # no file found: its environment says enough
            return ConfigFile(None, {}, ("/opt/bitnami/kafka/config/server.properties",))
        return ConfigFile("/etc/team/server.properties", parse_properties(
            "node.id=7\nprocess.roles=broker,controller\nlisteners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
            "advertised.listeners=PLAINTEXT://localhost:19092\ncontroller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"))

    nodes = plan_attached_nodes("p", [APP, team, container("kafka", E1_KAFKA, {9092: 9092})], read_config)
    assert asked == ["broker-a", "kafka"]  # kafka's environment names no log directory: its file is looked for
    assert plan_attached_nodes("p", [container(f"kafka-broker-0{i}", confluent(i), {9092: 9999 + i}) for i in (1, 2, 3)],
                               read_config) and asked == ["broker-a", "kafka"]  # theirs names everything: not read
    assert [(n["id"], n["container"], n["client_port"], n["config_file"]) for n in nodes] == [
        (0, "kafka", 9092, None), (7, "broker-a", 19092, "/etc/team/server.properties")]
    assert runs_kafka(team) and not runs_kafka(APP)


def test_a_container_whose_node_id_neither_its_environment_nor_a_config_file_gives_is_refused():
    stopped = container("kafka-old", {"KAFKA_PROCESS_ROLES": "broker"}, {}, status="exited")
    missing = container("kafka", {"KAFKA_PROCESS_ROLES": "broker"}, {9092: 9092})
    asked = []

    def read_config(name: str) -> ConfigFile:
        asked.append(name)
        return ConfigFile(None, {}, ("/opt/kafka/config/server.properties",))

    with pytest.raises(ClusterError) as e:
        plan_attached_nodes("p", [stopped, missing], read_config)
    assert asked == ["kafka"]  # an exited container is refused as it is, nothing read from it
    text = str(e.value)
    assert "container kafka-old: is exited" in text and "container kafka: no node id" in text
    assert "no broker config file was found (/opt/kafka/config/server.properties)" in text
