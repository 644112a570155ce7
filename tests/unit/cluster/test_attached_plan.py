"""Attaching to a team's compose project, the pure parts: which containers are Kafka nodes, the address
clients use, the metadata check, and the refusals (each naming the container and what is missing)."""
from __future__ import annotations

import pytest

from kafkaproof.cluster.attached import (AttachedCluster, is_kafka_env, metadata_problems, plan_attached_nodes,
                                         published_ports)
from kafkaproof.errors import ClusterError
from kafkaproof.spec.faults import PROCESS_KINDS

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


def test_only_process_faults_are_supported_and_the_others_are_refused_with_the_reason():
    assert AttachedCluster.supported_for() == frozenset(PROCESS_KINDS)
    reason = AttachedCluster.unsupported_reason(object.__new__(AttachedCluster), "isolate")
    assert "isolate" in reason and "network, proxy, rolling, clock and disk" in reason
