"""The manifest's `client_versions`: each producer's and consumer's client libraries, from new and old manifests."""
from __future__ import annotations

import pytest

from kafkaproof.spec.client_versions import (ClientVersion, ProcessClient, read_client_versions,
                                             requested_java_version, summary, to_manifest)
from kafkaproof.spec.manifest import Manifest

pytestmark = pytest.mark.unit

JAVA = (ClientVersion("kafka-clients", "3.9.2"),)
PY = (ClientVersion("confluent-kafka", "2.16.1"), ClientVersion("librdkafka", "2.16.0"))


def test_recorded_versions_round_trip_through_the_manifest():
    procs = [ProcessClient("producers", 0, "java", JAVA), ProcessClient("consumers", 0, "librdkafka", PY),
             ProcessClient("consumers", 1, "librdkafka", PY)]
    section = to_manifest(procs)
    assert section["producers"] == [{"index": 0, "client": "java",
                                     "libraries": [{"name": "kafka-clients", "version": "3.9.2"}]}]
    assert [e["index"] for e in section["consumers"]] == [0, 1]
    assert Manifest({"client_versions": section}).client_versions == procs
    assert summary(procs) == ["producer 0: kafka-clients 3.9.2",
                              "consumers 0-1: confluent-kafka 2.16.1, librdkafka 2.16.0"]


def test_processes_of_a_role_on_different_libraries_get_a_line_each():
    procs = [ProcessClient("producers", i, "java", JAVA) for i in (0, 2)] + \
        [ProcessClient("producers", 1, "librdkafka", PY)]
    assert summary(procs) == ["producers 0,2: kafka-clients 3.9.2",
                              "producer 1: confluent-kafka 2.16.1, librdkafka 2.16.0"]
    assert summary([ProcessClient("consumers", 0, "java", ())]) == ["consumer 0: java ?"]


def test_an_old_java_producer_run_is_read_off_its_clients_and_scenario():
    """What a Java-producer run recorded before the section existed: no kafka-clients version, confluent_kafka '2'."""
    old = {"versions": {"kafka": "4.3.1", "confluent_kafka": "2", "librdkafka": "2.16.0"},
           "scenario": {"cluster": {"kafka_version": "4.3.1"}, "producers": {"client": "java", "count": 1},
                        "consumers": {"count": 1}},
           "clients": {"producers": [{"index": 0, "client": "java"}],
                       "consumers": [{"index": 0, "client": "librdkafka"}]}}
    assert summary(read_client_versions(old)) == ["producer 0: kafka-clients 4.3.1", "consumer 0: librdkafka 2.16.0"]
    old["scenario"]["producers"]["client_version"] = "3.9.2"
    old["versions"]["confluent_kafka"] = "2.16.1"  # a whole version is kept
    assert summary(read_client_versions(old)) == ["producer 0: kafka-clients 3.9.2",
                                                  "consumer 0: confluent-kafka 2.16.1, librdkafka 2.16.0"]


def test_runs_before_the_clients_section_and_empty_manifests():
    procs = read_client_versions({"versions": {"librdkafka": "2.12.1"}, "scenario": {"producers": {"count": 2}}})
    assert summary(procs) == ["producers 0-1: librdkafka 2.12.1"]
    assert summary(read_client_versions({})) == ["producer 0: librdkafka ?"]
    assert read_client_versions({"client_versions": {}}) == []


def test_requested_java_version():
    assert requested_java_version({"cluster": {"kafka_version": "4.3.1"}, "consumers": {}}, "consumers") == "4.3.1"
    assert requested_java_version({"cluster": {"kafka_version": "4.3.1"},
                                   "consumers": {"client_version": "3.7.2"}}, "consumers") == "3.7.2"
