"""The audit's cluster inventory: its JSON round trip, its readable text, its pure helpers."""
from __future__ import annotations

import json

import pytest

from kafkaproof.spec.client_settings import ClientSettings
from kafkaproof.spec.inventory import (ClusterInventory, GroupInfo, GroupMember, NodeInfo, TopicInfo, differing,
                                       inventory_text, parse_feature_describe, release_of_metadata_version, roles_of,
                                       select_topics)

pytestmark = pytest.mark.unit


def inventory() -> ClusterInventory:
    auto = TopicInfo(name="orders", internal=False, partitions=1, replication_factor=1,
                     config={"min.insync.replicas": "1", "unclean.leader.election.enable": "false",
                             "retention.ms": "604800000", "cleanup.policy": "delete"},
                     overrides=(), replicas=((2,),), under_replicated=0, offline=0)
    safe = TopicInfo(name="payments", internal=False, partitions=3, replication_factor=3,
                     config={"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                             "retention.ms": "-1", "cleanup.policy": "compact"},
                     overrides=("cleanup.policy", "min.insync.replicas"),
                     replicas=((1, 2, 3), (2, 3, 1), (3, 1, 2)), under_replicated=1, offline=0)
    group = GroupInfo(group_id="billing", protocol="classic", state="STABLE", assignor="range", simple=False,
                      members=(GroupMember("billing-1", "/10.0.0.5", None, ("payments",)),))
    return ClusterInventory(
        bootstrap="k1:9092", cluster_id="abc", kafka_release="4.1", metadata_version="4.1-IV1", controller_id=1,
        controller_quorum="1@k1:9093", nodes=(NodeInfo(1, "k1", 9092, None, ("broker", "controller")),
                                              NodeInfo(2, "k2", 9092, "r2", None)),
        broker_config={"auto.create.topics.enable": "true", "default.replication.factor": "1"},
        broker_config_differs={"default.replication.factor": {1: "1", 2: "3"}},
        topics=(auto, safe), groups=(group,), notes=("n",), discovered_wall=1.5, topic_filter=("o*", "payments"))


def test_inventory_round_trips_through_json():
    inv = inventory()
    assert ClusterInventory.from_dict(json.loads(json.dumps(inv.to_dict()))) == inv
    assert inv.topic("payments").min_insync_replicas == 2 and inv.topic("orders").unclean_leader_election is False
    assert inv.groups[0].topics == ("payments",)
    with pytest.raises(KeyError, match="topics: orders, payments"):
        inv.topic("nope")


def test_inventory_text_has_one_row_per_topic_and_group():
    text = inventory_text(inventory())
    assert "Kafka 4.1 (metadata.version 4.1-IV1)" in text
    assert "default.replication.factor = 1  (differs by broker: {1: '1', 2: '3'})" in text
    orders = next(line for line in text.splitlines() if line.strip().startswith("orders"))
    assert orders.split() == ["orders", "1", "1", "1", "false", "604800000", "delete", "-"]
    assert any(line.split()[:4] == ["billing", "classic", "STABLE", "range"] for line in text.splitlines())


def test_pure_helpers():
    assert roles_of("controller, broker") == ("broker", "controller") and roles_of(None) is None
    assert differing({1: {"a": "1", "b": "x"}, 2: {"a": "1", "b": "y"}}, ("a", "b")) == {"b": {1: "x", 2: "y"}}
    text = ("Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: 5\n"
            "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
            "FinalizedVersionLevel: 4.1-IV1\tEpoch: 5\n")
    mv = parse_feature_describe(text)["metadata.version"]
    assert (release_of_metadata_version(mv["SupportedMaxVersion"]), mv["FinalizedVersionLevel"]) == ("4.3", "4.1-IV1")
    padded = ("[2026-11-27T20:55:52,329] INFO [AdminClient clientId=adminclient-1] Feature: x (Metadata)\n"
              "Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          "
              "SupportedMaxVersion: 4.3-IV0          FinalizedVersionLevel: 4.3-IV0          Epoch: 7\n")
    assert parse_feature_describe(padded) == {"metadata.version": {
        "SupportedMinVersion": "3.3-IV3", "SupportedMaxVersion": "4.3-IV0", "FinalizedVersionLevel": "4.3-IV0",
        "Epoch": "7"}}
    assert select_topics(["b", "a", "orders-1", "x"], ["orders-*", "a"]) == ["a", "orders-1"]
    assert select_topics(["b", "a"], []) == ["a", "b"]


def test_client_settings_redacted_for_printing():
    s = ClientSettings(source="a.yml", format="spring", client="java", bootstrap=None,
                       connection={"sasl.password": "pw"}, producer={}, consumer={})
    assert s.to_dict(redact=True)["connection"] == {"sasl.password": "***"}
    assert s.to_dict()["connection"] == {"sasl.password": "pw"}
