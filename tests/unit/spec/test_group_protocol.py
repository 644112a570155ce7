"""The consumer group protocol as a consumer setting (spec.group_protocol): refusals before anything starts,
restart settings of consumer faults, the manifest's protocol per consumer and the report's line."""
from __future__ import annotations

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.run.client_config import group_protocol_problems
from kafkaproof.spec import group_protocol as gp
from kafkaproof.spec.clients import effective_clients
from kafkaproof.spec.scenario import validate_document

pytestmark = pytest.mark.unit


def doc(consumers=None, cluster=None, faults=None):
    return {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10},
            "consumers": {"count": 2, **(consumers or {})}, "cluster": cluster or {}, "faults": faults or []}


def refused(document) -> str:
    with pytest.raises(ScenarioError) as e:
        validate_document(document, "s.yaml")
    return str(e.value)


def test_consumer_protocol_on_a_4x_cluster_and_either_client_is_accepted():
    for client in ("librdkafka", "java"):
        data = validate_document(doc({"client": client, "config": {"group.protocol": "consumer"}}), "s.yaml")
        assert [c["group_protocol"] for c in effective_clients(data)["consumers"]] == ["consumer", "consumer"]
    data = validate_document(doc(), "s.yaml")
    assert effective_clients(data)["consumers"][0]["group_protocol"] == "classic"  # the default


def test_unknown_protocol_and_classic_only_settings_are_refused_naming_the_field():
    assert "s.yaml: consumers.config.group.protocol: 'eager' is not allowed; allowed: classic, consumer" in \
        refused(doc({"config": {"group.protocol": "eager"}}))
    for name in ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"):
        message = refused(doc({"config": {"group.protocol": "consumer", name: 6000}}))
        assert f"consumers.config.{name}: not allowed with group.protocol=consumer" in message
    assert "consumers.config.group.remote.assignor: not allowed with group.protocol=classic" in \
        refused(doc({"config": {"group.remote.assignor": "uniform"}}))
    assert "assign mode joins no group" in refused(doc({"count": 1, "mode": "assign",
                                                        "config": {"group.protocol": "consumer"}}))


def test_cluster_and_java_client_versions_without_the_protocol_are_refused():
    message = refused(doc({"config": {"group.protocol": "consumer"}}, {"kafka_version": "3.9.2"}))
    assert "consumers.config.group.protocol: Kafka 3.9.2 (cluster.kafka_version) has no generally available" in message
    assert "group.coordinator.rebalance.protocols" in message
    preview = {"kafka_version": "3.9.2", "config": {"group.coordinator.rebalance.protocols": "classic,consumer"}}
    validate_document(doc({"config": {"group.protocol": "consumer"}}, preview), "s.yaml")  # the preview, enabled
    assert gp.java_problem("3.6.2") and "consumers.client_version" in gp.java_problem("3.6.2")
    assert gp.java_problem("3.7.0") is None and gp.java_problem("4.3.1") is None


def test_librdkafka_versions_before_2_4_are_refused_and_the_pinned_one_has_it():
    data = validate_document(doc({"config": {"group.protocol": "consumer"}}), "s.yaml")
    (problem,) = group_protocol_problems(data, librdkafka="2.3.0")
    assert problem.startswith("consumers.config.group.protocol: librdkafka 2.3.0 has no group.protocol=consumer")
    assert group_protocol_problems(data, librdkafka="2.16.0") == []  # confluent-kafka 2.16.1's: GA since 2.12.0
    assert group_protocol_problems(validate_document(doc(), "s.yaml"), librdkafka="2.3.0") == []


def test_a_consumer_fault_restarts_with_changed_settings_checked_like_the_consumers_own():
    migrate = {"group.protocol": "consumer", "session.timeout.ms": None}
    base = {"config": {"session.timeout.ms": 6000}}
    data = validate_document(doc(base, faults=[{"at": 1, "kind": "stop", "target": "consumer:0", "duration": 1,
                                                "params": {"config": migrate}}]), "s.yaml")
    assert gp.consumer_configs(data)[1] == ("faults[0].params.config", {"group.protocol": "consumer"})
    kept = {"at": 1, "kind": "kill", "target": "consumer:1", "params": {"config": {"group.protocol": "consumer"}}}
    assert "faults[0].params.config.session.timeout.ms: not allowed with group.protocol=consumer" in \
        refused(doc(base, faults=[kept]))
    owned = {**kept, "params": {"config": {"group.id": "other"}}}
    assert "faults[0].params.config.group.id: a scenario field owns it; use consumers.group" in \
        refused(doc(faults=[owned]))
    paused = {**kept, "kind": "pause"}
    assert "faults[0].params.config: not a parameter of pause" in refused(doc(faults=[paused]))
    assert "faults[0].params.config: expected dict, got 1" in refused(doc(faults=[{**kept, "params": {"config": 1}}]))


def test_restart_config_removes_nulls_and_the_report_line_shows_each_consumer_and_the_group():
    assert gp.restart_config({"a": 1, "b": 2}, {"b": None, "c": 3}) == {"a": 1, "c": 3}
    started = [{"consumer": 0, "incarnation": 0, "group_protocol": "classic"},
               {"consumer": 1, "incarnation": 0, "group_protocol": "consumer"},
               {"consumer": 0, "incarnation": 1, "group_protocol": "consumer"}]
    group = {"group": "g", "type": "consumer", "state": "stable", "members": [{}, {}]}
    assert gp.protocol_text(started, group) == ("consumer 0: classic → consumer; consumer 1: consumer; "
                                                "group g at the end: type consumer, stable, 2 member(s)")
    assert gp.protocol_text(None, None) is None
    assert "group not described: timed out" in gp.protocol_text([], {"group": "g", "error": "timed out"})
