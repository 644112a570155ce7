"""A scenario's `share` section (issue 46): defaults, and bad input refused before anything starts."""
from __future__ import annotations

import copy

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.spec.scenario import validate_document
from kafkaproof.spec.share_group import share_support

pytestmark = pytest.mark.unit

DOC = {"name": "share-x", "guarantee": "at-least-once", "producers": {"messages": 100}, "consumers": {"count": 0},
       "share": {"consumers": 3, "ack": {"release": 0.1, "no_ack": 0.05}, "delivery_limit": 3,
                 "lock_timeout_ms": 2000},
       "claims": {"share_group": {}}}


def doc(**changes) -> dict:
    d = copy.deepcopy(DOC)
    for path, value in changes.items():
        *head, last = path.split("__")
        node = d
        for key in head:
            node = node.setdefault(key, {})
        node[last] = value
    return d


def test_the_section_gets_its_defaults():
    share = validate_document(doc(), "s.yaml")["share"]
    assert share["group"] == "kp-share-share-x" and share["consumers"] == 3 and share["processing_ms"] == 0
    assert share["ack"] == {"mode": "explicit", "release": 0.1, "reject": 0.0, "no_ack": 0.05}
    assert (share["delivery_limit"], share["lock_timeout_ms"]) == (3, 2000)


@pytest.mark.parametrize("version, config, words", [
    ("3.9.2", {}, "Kafka 3.9.2 has no share groups"),
    ("4.0.0", {}, "4.0: early access with unstable RPCs"),
    ("4.1.1", {}, "set cluster.config.group.share.enable: true"),
    ("4.3.1", {"group.share.enable": "false"}, "share groups are off on the cluster"),
])
def test_a_cluster_without_share_groups_is_refused_naming_the_field(version, config, words):
    with pytest.raises(ScenarioError, match="s.yaml: share: .*" + words):
        validate_document(doc(cluster={"kafka_version": version, "config": config}), "s.yaml")
    assert share_support("4.1.1", {"group.share.enable": True}) is None and share_support("4.2.0", {}) is None


@pytest.mark.parametrize("change, field, words", [
    ({"share__config": {"group.protocol": "consumer"}}, "share.config.group.protocol", "no group protocol"),
    ({"share__config": {"share.acknowledgement.mode": "explicit"}}, "share.config.share.acknowledgement.mode",
     "share.ack.mode"),
    ({"share__ack": {"mode": "implicit", "reject": 0.1}}, "share.ack.mode", "need mode: explicit"),
    ({"share__ack": {"release": 0.6, "reject": 0.5}}, "share.ack", "add up to at most 1"),
    ({"share": None}, "claims.share_group", "needs a share section"),
])
def test_bad_share_settings_are_refused(change, field, words):
    d = doc(**change)
    if d["share"] is None:
        del d["share"]
    with pytest.raises(ScenarioError, match=f"s.yaml: {field}: .*{words}"):
        validate_document(d, "s.yaml")


def test_the_schema_refuses_limits_kafka_refuses():
    with pytest.raises(ScenarioError, match="share.delivery_limit"):
        validate_document(doc(share__delivery_limit=11), "s.yaml")


@pytest.mark.parametrize("change, field, words", [
    ({"consumers__client": "librdkafka"}, "consumers.client", "the Java driver's KafkaShareConsumer"),
    ({"consumers__client_version": "3.9.2"}, "consumers.client_version", "kafka-clients 3.9.2 has no KafkaShareConsumer"),
    ({"cluster__config": {"group.share.min.record.lock.duration.ms": 5000}},
     "cluster.config.group.share.min.record.lock.duration.ms", "would refuse the group's lock duration"),
])
def test_a_client_without_share_consumers_is_refused_naming_the_field(change, field, words):
    d = doc(cluster__kafka_version="4.3.1", **change)
    with pytest.raises(ScenarioError, match=f"s.yaml: {field}: .*{words}"):
        validate_document(d, "s.yaml")


def test_the_share_consumers_take_the_consumers_places_and_the_broker_takes_a_short_lock():
    data = validate_document(doc(cluster={"kafka_version": "4.3.1"}), "s.yaml")
    assert data["consumers"]["count"] == 3 and data["consumers"]["client"] == "java"
    assert data["cluster"]["config"]["group.share.min.record.lock.duration.ms"] == 2000
    long_lock = validate_document(doc(cluster={"kafka_version": "4.3.1"}, share__lock_timeout_ms=90_000), "s.yaml")
    assert long_lock["cluster"]["config"] == {"group.share.max.record.lock.duration.ms": 90_000}
    with pytest.raises(ScenarioError, match="faults\\[0\\].target: 'consumer:3': consumers are consumer:0..consumer:2"):
        validate_document(doc(cluster={"kafka_version": "4.3.1"},
                              faults=[{"at": 1, "kind": "kill", "target": "consumer:3"}]), "s.yaml")
