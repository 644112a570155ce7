"""Reading a container's Kafka node from its environment, in the bitnami, apache/kafka and Confluent
conventions: the seeds' compose services, written from each image's documented variable names."""
from __future__ import annotations

import pytest

from kafkaproof.cluster.attach_env import (ConfigFile, client_listener, config_path_from_commands, convention,
                                            kafka_properties, needs_config_file, parse_properties, read_kafka_env)
from kafkaproof.errors import ClusterError

from seed_envs import E1_KAFKA, E1_KAFKA2, confluent


def test_bitnami_seed_nodes_are_read_with_their_advertised_localhost_ports():
    a = read_kafka_env(E1_KAFKA, "kafka")
    b = read_kafka_env([f"{k}={v}" for k, v in E1_KAFKA2.items()], "kafka2")  # docker inspect's Config.Env form
    assert (a.convention, a.node_id, a.roles) == ("bitnami", 0, ("controller", "broker"))
    assert a.is_broker and b.node_id == 1
    assert [x.name for x in a.listeners] == ["PLAINTEXT", "CONTROLLER"] and a.listeners[0].port == 9092
    assert a.controller_listeners == ("CONTROLLER",) and a.log_dir == "/bitnami/kafka/data"
    assert client_listener(a, {9092: 9092}, "kafka").address == "localhost:9092"
    assert client_listener(b, {9092: 9093}, "kafka2").address == "localhost:9093"


def test_confluent_seed_nodes_use_their_external_listener():
    for i in (1, 2, 3):
        node = read_kafka_env(confluent(i), f"kafka-broker-0{i}")
        assert (node.convention, node.node_id, node.roles) == ("apache", i, ("broker", "controller"))
        assert node.log_dir == "/var/lib/kafka/data"
        chosen = client_listener(node, {9092: 9999 + i, 9101: 9101}, f"kafka-broker-0{i}")
        assert (chosen.name, chosen.address) == ("EXTERNAL", f"localhost:{9999 + i}")
    props = kafka_properties(confluent(1))
    assert "jmx.port" not in props and props["offsets.topic.replication.factor"] == "3"


def test_apache_names_unescape_underscores_and_dashes_and_skip_launcher_variables():
    env = {"KAFKA_NODE_ID": "4", "KAFKA_PROCESS_ROLES": "broker", "KAFKA_HEAP_OPTS": "-Xmx1g",
           "KAFKA_LISTENERS": "PLAINTEXT://:9092", "KAFKA_FOO__BAR___BAZ": "1", "KAFKA_OPTS": "-Dx"}
    assert kafka_properties(env) == {"node.id": "4", "process.roles": "broker", "listeners": "PLAINTEXT://:9092",
                                     "foo_bar-baz": "1"}
    node = read_kafka_env(env, "c")
    assert node.advertised == node.listeners and node.log_dir == "/tmp/kraft-combined-logs"
    assert convention(env) == "apache"


def test_a_dedicated_controller_needs_no_client_listener():
    env = {"KAFKA_NODE_ID": "100", "KAFKA_PROCESS_ROLES": "controller", "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
           "KAFKA_LISTENERS": "CONTROLLER://:9093", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT"}
    node = read_kafka_env(env, "ctl")
    assert not node.is_broker and node.advertised == ()


@pytest.mark.parametrize("env, words", [
    ({"KAFKA_PROCESS_ROLES": "broker"}, ["kafka9", "KAFKA_NODE_ID", "config file"]),
    ({"KAFKA_CFG_PROCESS_ROLES": "broker"}, ["KAFKA_CFG_NODE_ID", "bitnami"]),
    ({"KAFKA_NODE_ID": "x", "KAFKA_PROCESS_ROLES": "broker"}, ["KAFKA_NODE_ID='x'"]),
    ({"KAFKA_BROKER_ID": "1"}, ["KAFKA_PROCESS_ROLES", "ZooKeeper"]),
    ({"KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker", "KAFKA_LISTENERS": "FOO://:1"}, ["FOO", "protocol"]),
    ({"KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker", "KAFKA_LISTENERS": "PLAINTEXT:9092"}, ["NAME://host:port"]),
])
def test_unreadable_environments_are_refused_naming_the_container_and_variable(env, words):
    with pytest.raises(ClusterError) as e:
        read_kafka_env(env, "kafka9")
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_broker_no_published_port_reaches_or_a_secured_listener_is_refused():
    node = read_kafka_env(E1_KAFKA, "kafka")
    with pytest.raises(ClusterError, match="kafka: no advertised listener .* published 9092->19092"):
        client_listener(node, {9092: 19092}, "kafka")
    tls = read_kafka_env({**confluent(1), "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":
                          "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:SSL"}, "kafka-broker-01")
    with pytest.raises(ClusterError, match="EXTERNAL is SSL; .*not built yet"):
        client_listener(tls, {9092: 10000}, "kafka-broker-01")


# --- the broker's own config file, when the environment does not say -------------------------------------------

SERVER_PROPERTIES = """# written by the team, mounted at /opt/kafka/config/server.properties
node.id=2
process.roles=broker,\\
    controller
listeners = PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners:PLAINTEXT://localhost:19092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
! another comment style
log.dirs=/data/kafka
"""


def test_properties_files_are_parsed_as_java_reads_them():
    props = parse_properties(SERVER_PROPERTIES + "a\\=b=c\\td\nempty\nnode.id=3\n")
    assert props["process.roles"] == "broker,controller" and props["listeners"].startswith("PLAINTEXT://:9092")
    assert props["advertised.listeners"] == "PLAINTEXT://localhost:19092" and props["a=b"] == "c\td"
    assert props["empty"] == "" and props["node.id"] == "3"  # the last of repeated keys wins
    assert not any(k.startswith(("#", "!")) for k in props)


def test_the_config_path_comes_from_the_brokers_command_line():
    assert config_path_from_commands(["/bin/bash /etc/kafka/docker/run",
                                      "java -Xmx1g -cp /opt/kafka/libs/* kafka.Kafka /etc/team/broker.properties"]) \
        == "/etc/team/broker.properties"
    assert config_path_from_commands(["sh /opt/kafka/bin/kafka-server-start.sh /opt/kafka/config/my.properties"]) \
        == "/opt/kafka/config/my.properties"
    assert config_path_from_commands(["java kafka.Kafka", "sleep 10"]) is None


def test_the_config_file_gives_what_the_environment_does_not_and_the_environment_wins():
    assert needs_config_file({"KAFKA_HEAP_OPTS": "-Xmx1g"}) and not needs_config_file(confluent(1))
    assert needs_config_file({"KAFKA_CFG_NODE_ID": "0"})  # roles and listeners missing
    assert needs_config_file({k: v for k, v in confluent(1).items() if k != "KAFKA_LOG_DIRS"})  # the log directory
    config = ConfigFile("/opt/kafka/config/server.properties", parse_properties(SERVER_PROPERTIES))
    node = read_kafka_env({"KAFKA_HEAP_OPTS": "-Xmx1g"}, "kafka7", config)
    assert (node.node_id, node.roles, node.log_dir) == (2, ("broker", "controller"), "/data/kafka")
    assert client_listener(node, {9092: 19092}, "kafka7").address == "localhost:19092"
    assert read_kafka_env({"KAFKA_NODE_ID": "5"}, "kafka7", config).node_id == 5
    bitnami = read_kafka_env({}, "k", ConfigFile("/opt/bitnami/kafka/config/server.properties",
                                                 {"node.id": "1", "process.roles": "controller"}))
    assert bitnami.convention == "bitnami" and bitnami.log_dir == "/bitnami/kafka/data"


@pytest.mark.parametrize("config, words", [
    (ConfigFile(None, {}, ("/opt/kafka/config/server.properties", "/etc/kafka/kafka.properties")),
     ["kafka9", "node id", "no broker config file was found", "/etc/kafka/kafka.properties"]),
    (ConfigFile("/etc/k.properties", {"process.roles": "broker"}), ["kafka9", "node id", "nor in its config file "
                                                                    "/etc/k.properties", "node.id"]),
    (ConfigFile("/etc/k.properties", {"node.id": "1"}), ["kafka9", "PROCESS_ROLES", "/etc/k.properties", "process.roles"]),
    (ConfigFile("/etc/k.properties", {"node.id": "1", "process.roles": "broker"}),
     ["kafka9", "without listeners", "/etc/k.properties", "(listeners)"]),
])
def test_what_neither_the_environment_nor_the_config_file_gives_is_refused_naming_both(config, words):
    with pytest.raises(ClusterError) as e:
        read_kafka_env({"KAFKA_HEAP_OPTS": "-Xmx1g"}, "kafka9", config)
    assert all(w in str(e.value) for w in words), str(e.value)
