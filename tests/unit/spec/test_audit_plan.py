"""The audit's plan: reliability classes, --max-classes grouping, the replica scenarios of the fault matrix, the
fix list, the files written and the CLI's --plan-only path (discovery stubbed at its function boundary)."""
from __future__ import annotations

import json

import pytest
import yaml

from kafkaproof import cli
from kafkaproof.spec.audit_fixes import FIXES, fix_candidates
from kafkaproof.spec.audit_plan import (FAULTS, check_document, class_scenarios, plan_audit, reliability_classes,
                                        replica_version, scenario_name, write_suite)
from kafkaproof.spec.client_settings import ClientSettings
from kafkaproof.spec.inventory import ClusterInventory, NodeInfo, TopicInfo
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION

pytestmark = pytest.mark.unit

BROKERS = {"auto.create.topics.enable": "true", "default.replication.factor": "1", "num.partitions": "1",
           "min.insync.replicas": "1", "unclean.leader.election.enable": "false",
           "offsets.topic.replication.factor": "3", "log.retention.hours": "168"}


def topic(name: str, rf: int = 1, partitions: int = 1, min_isr: str = "1", cleanup: str = "delete",
          overrides: tuple[str, ...] = (), internal: bool = False, unclean: str = "false") -> TopicInfo:
    return TopicInfo(name=name, internal=internal, partitions=partitions, replication_factor=rf,
                     config={"min.insync.replicas": min_isr, "unclean.leader.election.enable": unclean,
                             "retention.ms": "604800000", "cleanup.policy": cleanup},
                     overrides=overrides, replicas=tuple((1,) * rf for _ in range(partitions)),
                     under_replicated=0, offline=0)


def inventory(*topics: TopicInfo, release: str | None = "3.9") -> ClusterInventory:
    return ClusterInventory(
        bootstrap="k1:9092", cluster_id="abc", kafka_release=release, metadata_version="3.9-IV0", controller_id=1,
        controller_quorum="1@k1:9093,2@k2:9093,3@k3:9093",
        nodes=tuple(NodeInfo(i, f"k{i}", 9092, None, ("broker", "controller")) for i in (1, 2, 3)),
        broker_config=dict(BROKERS), broker_config_differs={}, topics=topics, groups=(), discovered_wall=1.8e9)


# The cluster: an auto-created RF 1 topic, an RF 3 / min ISR 2 topic, a compacted one, an internal one.
THREE = (topic("events"), topic("orders", rf=3, partitions=6, min_isr="2", overrides=("min.insync.replicas",)),
         topic("users", rf=3, partitions=3, min_isr="2", cleanup="compact", overrides=("cleanup.policy", "min.insync.replicas")),
         topic("__consumer_offsets", rf=3, partitions=50, internal=True))
# The seeds' E1 producer settings, as a Spring application.yml gives them (Java names).
SPRING = ClientSettings(source="application.yml", format="spring", client="java", bootstrap="k1:9092", connection={},
                        producer={"acks": "all", "retries": "3", "request.timeout.ms": "1500",
                                  "delivery.timeout.ms": "8000", "enable.idempotence": "false",
                                  "key.serializer": "org.apache.kafka.common.serialization.StringSerializer"},
                        consumer={"group.id": "my-group", "enable.auto.commit": "false",
                                  "isolation.level": "read_uncommitted", "auto.offset.reset": "latest"})


def test_topics_fall_into_classes_by_what_decides_reliability_and_internal_ones_are_left_out():
    classes, excluded = reliability_classes(inventory(*THREE))
    assert [(c.label, c.topics) for c in classes] == [("rf1-isr1-auto", ("events",)), ("rf3-isr2", ("orders",)),
                                                      ("rf3-isr2-compact", ("users",))]
    assert list(excluded) == ["__consumer_offsets"] and "internal" in excluded["__consumer_offsets"]
    assert classes[1].partitions == 3 and classes[0].settings["auto_created"] is True
    many = inventory(*THREE, topic("clicks"), topic("orders-eu", rf=3, min_isr="2", overrides=("min.insync.replicas",)))
    classes, _ = reliability_classes(many)
    assert [(c.label, c.topics) for c in classes][:2] == [("rf1-isr1-auto", ("clicks", "events")),
                                                          ("rf3-isr2", ("orders", "orders-eu"))]


def test_max_classes_groups_the_smallest_into_the_closest_and_says_how():
    inv = inventory(*THREE, topic("clicks"), topic("orders-eu", rf=3, min_isr="2", overrides=("min.insync.replicas",)))
    classes, _ = reliability_classes(inv, max_classes=2)
    assert [(c.label, c.topics) for c in classes] == [("rf1-isr1-auto", ("clicks", "events")),
                                                      ("rf3-isr2", ("orders", "orders-eu", "users"))]
    (grouped,) = classes[1].grouped
    assert (grouped.topic, grouped.from_class, grouped.differs) == ("users", "rf3-isr2-compact", {"cleanup.policy": "compact"})
    assert reliability_classes(inv, max_classes=2)[0] == classes  # deterministic: same input, same plan
    with pytest.raises(Exception, match="give 1 or more"):
        reliability_classes(inv, max_classes=0)


def test_replica_version_is_the_clusters_line_when_installable():
    assert replica_version("3.9") == (PRODUCTION_KAFKA_VERSION, None)
    assert replica_version(DEFAULT_KAFKA_VERSION.rsplit(".", 1)[0]) == (DEFAULT_KAFKA_VERSION, None)
    assert replica_version("3.8") == ("3.8.0", "the replica runs 3.8.0, the first release of the cluster's line 3.8")
    assert replica_version("9.9")[0] == DEFAULT_KAFKA_VERSION and "cannot be installed" in replica_version("9.9")[1]
    assert replica_version("2.8")[0] == DEFAULT_KAFKA_VERSION and replica_version(None)[0] == DEFAULT_KAFKA_VERSION


@pytest.mark.parametrize("settings", [SPRING, None], ids=["spring", "defaults"])
def test_every_class_and_fault_is_a_valid_scenario(settings):
    plan = plan_audit(inventory(*THREE), settings)
    assert (plan.kafka_version, plan.brokers, plan.controllers) == (PRODUCTION_KAFKA_VERSION, 3, 0)
    names = []
    for cls in plan.classes:
        docs = class_scenarios(plan, cls)
        assert list(docs) == list(FAULTS)
        for fault, doc in docs.items():
            resolved = check_document(doc)
            assert len(resolved["faults"]) == 1  # one fault per scenario: a verdict names the fault
            assert resolved["guarantee"] == "at-least-once" and "delivery" in resolved["claims"]
            assert resolved["topic"]["name"] == cls.topic
            names.append(doc["name"])
    assert len(set(names)) == len(names) == 3 * len(FAULTS)


def test_the_scenario_carries_the_clusters_and_the_teams_settings():
    plan = plan_audit(inventory(*THREE), SPRING)
    auto, safe, _ = plan.classes
    outage = class_scenarios(plan, auto)["leader-outage"]
    assert outage["topic"] == {"name": "events", "partitions": 1, "replication_factor": 1, "create": False}
    assert outage["cluster"]["config"]["default.replication.factor"] == "1"
    assert "log.retention.hours" not in outage["cluster"]["config"]
    assert outage["faults"] == [{"at": 6.0, "kind": "stop", "target": "leader:0", "duration": 18.0}]  # 8 s + 10
    assert outage["producers"]["client"] == "java" and outage["producers"]["config"]["delivery.timeout.ms"] == "8000"
    assert "key.serializer" not in outage["producers"]["config"]
    assert outage["consumers"]["isolation_level"] == "read_uncommitted" and outage["consumers"]["config"] == {}
    assert outage["consumers"]["group"] == "my-group" and "commit" not in outage["consumers"]
    assert "exercised" not in outage  # RF 1: no new leader to wait for
    kill = class_scenarios(plan, safe)["leader-kill"]
    assert kill["topic"]["config"] == {"min.insync.replicas": 2, "cleanup.policy": "delete",
                                       "unclean.leader.election.enable": "false"}
    assert kill["exercised"] == [{"check": "leader_change", "partition": 0}]
    assert any("auto.offset.reset=latest not taken over" in n for n in plan.notes)
    lost = check_document(class_scenarios(plan, safe)["lost-ack"])
    assert lost["cluster"]["proxy"] is True
    assert check_document(class_scenarios(plan, safe)["power-loss"])["cluster"]["disk"] is True


def test_the_fix_list_smallest_first_skipping_what_does_not_apply():
    plan = plan_audit(inventory(*THREE), SPRING)
    auto, safe, _ = plan.classes
    for cls in (auto, safe):
        for doc in class_scenarios(plan, cls).values():
            for cand in fix_candidates(plan, cls, doc):
                check_document(cand.document)
    outage = class_scenarios(plan, auto)["leader-outage"]
    names = [c.name for c in fix_candidates(plan, auto, outage)]
    # single changes first (RF 3 only with min ISR 2; acks already all; idempotence applies; no longer delivery
    # timeout under leader-outage: the outage is that timeout + 10 s), then combined
    assert names == ["rf3+min-isr-2", "idempotence", "create-topic", "rf3+min-isr-2+idempotence",
                     "rf3+min-isr-2+idempotence+create-topic"]
    kill_names = [c.name for c in fix_candidates(plan, auto, class_scenarios(plan, auto)["leader-kill"])]
    assert kill_names[:4] == ["rf3+min-isr-2", "idempotence", "delivery-timeout", "create-topic"]
    rf3_isr2 = next(c for c in fix_candidates(plan, auto, outage) if c.name == "rf3+min-isr-2").document
    assert rf3_isr2["cluster"]["config"]["default.replication.factor"] == "3"
    assert rf3_isr2["cluster"]["config"]["min.insync.replicas"] == "2"
    kill = class_scenarios(plan, safe)["leader-kill"]
    # already RF 3 and min ISR 2, delivery timeout (8 s) under the 10 s kill: idempotence and the timeout
    assert [c.name for c in fix_candidates(plan, safe, kill)] == ["idempotence", "delivery-timeout",
                                                                  "idempotence+delivery-timeout"]
    timeout = next(c for c in fix_candidates(plan, safe, kill) if c.name == "delivery-timeout").document
    assert timeout["producers"]["config"]["delivery.timeout.ms"] == 40000
    assert set(FIXES) == {"rf3", "min-isr-2", "acks-all", "idempotence", "delivery-timeout", "create-topic"}


def test_rf3_alone_where_min_isr_2_is_already_there():
    isr2 = dict(BROKERS, **{"min.insync.replicas": "2"})
    inv = inventory(topic("events", min_isr="2"))
    plan = plan_audit(ClusterInventory.from_dict({**inv.to_dict(), "broker_config": isr2}), SPRING)
    (cls,) = plan.classes
    names = [c.name for c in fix_candidates(plan, cls, class_scenarios(plan, cls)["leader-kill"])]
    assert names[0] == "rf3" and "rf3+min-isr-2" not in names


def test_acks_all_comes_before_idempotence_and_names_stay_short():
    acks1 = ClientSettings(source="p", format="librdkafka", client="librdkafka", bootstrap=None, connection={},
                           producer={"acks": "1"}, consumer={})
    plan = plan_audit(inventory(topic("t", rf=3, min_isr="2", overrides=("min.insync.replicas",))), acks1)
    (cls,) = plan.classes
    doc = class_scenarios(plan, cls)["rolling-restart"]
    assert [c.name for c in fix_candidates(plan, cls, doc)] == ["acks-all", "acks-all+idempotence"]
    assert len(scenario_name("rf3-isr2-unclean-compact-flush-auto", "rolling-restart", "fix-" + "-".join(FIXES))) == 63


def test_write_suite_writes_ordinary_scenario_files_with_a_header(tmp_path):
    from kafkaproof.spec.scenario import load
    plan = plan_audit(inventory(*THREE), SPRING)
    written = write_suite(plan, tmp_path / "suite", generated_wall=1.8e9 + 60)
    files = sorted(p.name for p in written)
    assert len(files) == 3 * len(FAULTS) + 1 and "audit-rf1-isr1-auto-leader-outage.yaml" in files
    text = (tmp_path / "suite" / "audit-rf3-isr2-leader-kill.yaml").read_text()
    assert text.startswith("# Generated by `kafkaproof audit` on 2027-01-15 08:01:00 UTC from the cluster abc at k1:9092")
    assert "keep it as your own suite" in text.splitlines()[1]
    assert load(tmp_path / "suite" / "audit-rf3-isr2-leader-kill.yaml").name == "audit-rf3-isr2-leader-kill"
    summary = json.loads((tmp_path / "suite" / "audit-plan.json").read_text())
    assert summary["scenarios"]["rf1-isr1-auto"]["power-loss"] == "audit-rf1-isr1-auto-power-loss.yaml"
    assert summary["fixes"]["rf1-isr1-auto"][0] == "rf3+min-isr-2"
    again = write_suite(plan, tmp_path / "again", generated_wall=1.8e9 + 60)
    assert [p.read_text() for p in written] == [p.read_text() for p in again]  # deterministic


def test_cli_plan_only_discovers_then_writes_and_prints_the_plan(tmp_path, monkeypatch, capsys):
    import kafkaproof.cluster.discovery as discovery
    app = tmp_path / "application.yml"
    app.write_text(yaml.safe_dump({"spring": {"kafka": {"bootstrap-servers": "k1:9092", "producer": {
        "acks": "all", "retries": 3, "properties": {"delivery.timeout.ms": 8000, "enable.idempotence": False}}}}}))
    seen = {}

    def fake_discover(bootstrap, connection, topics=()):
        seen.update(bootstrap=bootstrap, topics=list(topics))
        return inventory(*THREE)
    monkeypatch.setattr(discovery, "discover", fake_discover)
    out = tmp_path / "suite"
    assert cli.main(["audit", "--bootstrap", "k1:9092", "--spring-config", str(app), "--topics", "events,orders,users",
                     "--max-classes", "2", "--plan-only", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert seen == {"bootstrap": "k1:9092", "topics": ["events", "orders", "users"]}
    assert "classes: 2 (--max-classes 2)" in printed and "grouped: users (its own class rf3-isr2-compact" in printed
    assert "excluded: __consumer_offsets" in printed and f"into {out}" in printed
    assert len(list(out.glob("*.yaml"))) == 2 * len(FAULTS)
    assert cli.main(["audit", "--bootstrap", "k1:9092", "--plan-only"]) == 2
    assert "--out DIR" in capsys.readouterr().err
