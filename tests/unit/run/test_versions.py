"""Measuring which client library and exact version each worker runs on (kafkaproof.run.versions)."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kafkaproof.run.scenario_run import versions
from kafkaproof.run.versions import client_versions, jar_version, java_client_versions, python_client_versions
from kafkaproof.spec.client_versions import ClientVersion

pytestmark = pytest.mark.unit


class _CK:
    """confluent-kafka 2.16's shape: `version()` is the text alone, `libversion()` a (text, int) pair."""
    __version__ = "2.16.1"

    @staticmethod
    def version():
        return "2.16.1"

    @staticmethod
    def libversion():
        return ("2.16.0", 0x20a00ff)


class _OldCK:
    @staticmethod
    def version():
        return ("2.6.0", 0x2060000)

    @staticmethod
    def libversion():
        return ("2.6.0", 0x20600ff)


def test_python_driver_versions_are_whole_whatever_shape_confluent_kafka_gives():
    assert python_client_versions(_CK) == (ClientVersion("confluent-kafka", "2.16.1"),
                                           ClientVersion("librdkafka", "2.16.0"))
    assert python_client_versions(_OldCK)[0] == ClientVersion("confluent-kafka", "2.6.0")
    # the installed module, as the run records it: a whole version, not its first character ('2' before)
    v = versions("4.3.1")
    assert "." in v["confluent_kafka"] and "." in v["librdkafka"] and v["kafka"] == "4.3.1"


def _jar(path: Path, properties: str | None) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("org/apache/kafka/Dummy.class", b"")
        if properties is not None:
            z.writestr("kafka/kafka-version.properties", properties)
    return path


def test_jar_version_reads_the_jar_then_its_name(tmp_path):
    # what AppInfoParser reports wins over the file name (a renamed jar still says what it is)
    assert jar_version(_jar(tmp_path / "kafka-clients-9.9.9.jar", "commitId=abc\nversion=3.9.2\n")) == "3.9.2"
    assert jar_version(_jar(tmp_path / "kafka-clients-4.3.1.jar", None)) == "4.3.1"
    assert jar_version(tmp_path / "missing" / "kafka-clients-3.7.2.jar") == "3.7.2"
    assert jar_version(_jar(tmp_path / "other.jar", None)) is None
    classpath = [tmp_path / "kafkaproof-driver.jar", _jar(tmp_path / "kafka-clients-4.3.1.jar", "version=4.3.1"),
                 tmp_path / "zstd-jni-1.5.6-4.jar"]
    assert java_client_versions(classpath) == (ClientVersion("kafka-clients", "4.3.1"),)
    assert java_client_versions([tmp_path / "slf4j-api-2.0.jar"]) == (ClientVersion("kafka-clients", None),)


def test_each_producer_and_consumer_gets_its_driver_s_libraries(tmp_path):
    asked: list[str] = []

    def classpath(version: str) -> list[Path]:
        asked.append(version)
        return [_jar(tmp_path / f"kafka-clients-{version}.jar", f"version={version}\n")]

    scenario = {"cluster": {"kafka_version": "4.3.1"}, "producers": {"client": "java", "count": 2},
                "consumers": {"count": 1, "client": "java", "client_version": "3.9.2"}}
    procs = client_versions(scenario, classpath, python=lambda: python_client_versions(_CK))
    assert [(p.role, p.index, p.client, p.label()) for p in procs] == [
        ("producers", 0, "java", "kafka-clients 4.3.1"), ("producers", 1, "java", "kafka-clients 4.3.1"),
        ("consumers", 0, "java", "kafka-clients 3.9.2")]
    assert asked == ["4.3.1", "3.9.2"]  # once per version
    scenario["consumers"] = {"count": 1}
    procs = client_versions(scenario, classpath, python=lambda: python_client_versions(_CK))
    assert procs[-1].label() == "confluent-kafka 2.16.1, librdkafka 2.16.0" and procs[-1].client == "librdkafka"
