"""The audit's cluster inventory: its JSON round trip, its readable text, and discovery's pure pieces."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kafkaproof import cli
from kafkaproof.cluster.discovery import group_info, select_topics, topic_info
from kafkaproof.spec.client_settings import ClientSettings
from kafkaproof.spec.inventory import (ClusterInventory, GroupInfo, GroupMember, NodeInfo, TopicInfo, differing,
                                       inventory_text, parse_feature_describe, release_of_metadata_version, roles_of)

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
    assert select_topics(["b", "a", "orders-1", "x"], ["orders-*", "a"]) == ["a", "orders-1"]
    assert select_topics(["b", "a"], []) == ["a", "b"]


def test_topic_and_group_from_admin_answers():
    from confluent_kafka.admin import ConfigSource
    part = lambda leader, replicas, isrs: SimpleNamespace(leader=leader, replicas=replicas, isrs=isrs)
    md = SimpleNamespace(partitions={1: part(-1, [2, 3], [2]), 0: part(1, [1, 2], [1, 2])})
    entry = lambda value, source: SimpleNamespace(value=value, source=source)
    t = topic_info("t", md, {"min.insync.replicas": entry("2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                             "retention.ms": entry("1000", ConfigSource.DEFAULT_CONFIG)}, internal=False)
    assert (t.partitions, t.replication_factor, t.replicas, t.under_replicated, t.offline) == (2, 2, ((1, 2), (2, 3)), 1, 1)
    assert t.overrides == ("min.insync.replicas",) and t.config["retention.ms"] == "1000"
    assert t.config["cleanup.policy"] is None
    tp = SimpleNamespace(topic="t", partition=0)
    member = SimpleNamespace(client_id="c1", host="/h", group_instance_id=None,
                             assignment=SimpleNamespace(topic_partitions=[tp]))
    desc = SimpleNamespace(group_id="g", members=[member], type=SimpleNamespace(name="CONSUMER"),
                           state=SimpleNamespace(name="STABLE"), partition_assignor="uniform",
                           is_simple_consumer_group=False)
    assert group_info(desc) == GroupInfo("g", "consumer", "STABLE", "uniform", False,
                                         (GroupMember("c1", "/h", None, ("t",)),))


def test_audit_cli_refuses_what_is_not_built(capsys):
    assert cli.main(["audit", "--bootstrap", "127.0.0.1:9"]) == 2
    assert "only discovery is built so far: give --discover-only" in capsys.readouterr().err


def test_client_settings_redacted_for_printing():
    s = ClientSettings(source="a.yml", format="spring", client="java", bootstrap=None,
                       connection={"sasl.password": "pw"}, producer={}, consumer={})
    assert s.to_dict(redact=True)["connection"] == {"sasl.password": "***"}
    assert s.to_dict()["connection"] == {"sasl.password": "pw"}
