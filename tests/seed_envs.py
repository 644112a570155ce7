"""The seeds' Kafka services' environments (docs: seed-experiments), for the attach tests: E1's two bitnami
nodes and a three-node Confluent project with an EXTERNAL listener on 10000-10002."""
from __future__ import annotations

# E1's two bitnami nodes (services kafka / kafka2), advertised localhost:9092 / localhost:9093.
E1_KAFKA = {
    "KAFKA_CFG_NODE_ID": "0", "KAFKA_CFG_PROCESS_ROLES": "controller,broker",
    "KAFKA_CFG_CONTROLLER_QUORUM_VOTERS": "0@kafka:9093,1@kafka2:9093",
    "KAFKA_CFG_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "KAFKA_CFG_ADVERTISED_LISTENERS": "PLAINTEXT://localhost:9092",
    "KAFKA_CFG_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "KAFKA_CFG_CONTROLLER_LISTENER_NAMES": "CONTROLLER", "KAFKA_KRAFT_CLUSTER_ID": "abc",
    "KAFKA_HEAP_OPTS": "-Xmx512m", "BITNAMI_APP_NAME": "kafka", "PATH": "/usr/bin"}
E1_KAFKA2 = {**E1_KAFKA, "KAFKA_CFG_NODE_ID": "1", "KAFKA_CFG_ADVERTISED_LISTENERS": "PLAINTEXT://localhost:9093"}
# The three-node project (kafka-broker-01..03) with an EXTERNAL listener on 10000-10002, Confluent's names.
def confluent(i: int) -> dict[str, str]:
    return {"KAFKA_NODE_ID": str(i), "KAFKA_PROCESS_ROLES": "broker,controller", "CLUSTER_ID": "xyz",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@kafka-broker-01:29093,2@kafka-broker-02:29093,3@kafka-broker-03:29093",
            "KAFKA_LISTENERS": "INTERNAL://0.0.0.0:29092,CONTROLLER://0.0.0.0:29093,EXTERNAL://0.0.0.0:9092",
            "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://kafka-broker-0{i}:29092,EXTERNAL://localhost:{9999 + i}",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL", "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data", "KAFKA_CONFLUENT_SUPPORT_METRICS_ENABLE": "false",
            "KAFKA_JMX_PORT": "9101", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3"}
