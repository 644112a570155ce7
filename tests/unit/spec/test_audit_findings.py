"""The audit's findings: each one fires on the setting it is about and stays silent otherwise; their order."""
from __future__ import annotations

import dataclasses
import json

import pytest

from kafkaproof.spec.audit_findings import SEVERITIES, audit_findings
from kafkaproof.spec.audit_plan import plan_audit
from kafkaproof.spec.client_settings import ClientSettings, UnknownKey
from kafkaproof.spec.inventory import ClusterInventory, NodeInfo, TopicInfo

pytestmark = pytest.mark.unit

# Brokers that give no broker finding: 3 brokers, RF 3, min ISR 2, no auto-creation, internal logs RF 3.
GOOD_BROKERS = {"auto.create.topics.enable": "false", "default.replication.factor": "3", "num.partitions": "3",
                "min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2", "log.flush.interval.messages": "9223372036854775807",
                "log.flush.interval.ms": None}
# A producer and consumer that give no client finding.
GOOD_PRODUCER = {"acks": "all", "enable.idempotence": "true", "delivery.timeout.ms": "120000"}
GOOD_CONSUMER = {"group.id": "g", "enable.auto.commit": "false", "isolation.level": "read_committed"}


def topic(name: str = "orders", rf: int = 3, partitions: int = 6, min_isr: str | None = "2", cleanup: str = "delete",
          overrides: tuple[str, ...] = ("min.insync.replicas",), unclean: str = "false", internal: bool = False,
          under: int = 0, offline: int = 0, **config: str) -> TopicInfo:
    return TopicInfo(name=name, internal=internal, partitions=partitions, replication_factor=rf,
                     config={"min.insync.replicas": min_isr, "unclean.leader.election.enable": unclean,
                             "retention.ms": "604800000", "cleanup.policy": cleanup, **config},
                     overrides=overrides, replicas=tuple((1,) * rf for _ in range(partitions)),
                     under_replicated=under, offline=offline)


def inventory(*topics: TopicInfo, brokers: int = 3, differs: dict | None = None, **broker_config) -> ClusterInventory:
    return ClusterInventory(
        bootstrap="k1:9092", cluster_id="abc", kafka_release="3.9", metadata_version="3.9-IV0", controller_id=1,
        controller_quorum=None, nodes=tuple(NodeInfo(i, f"k{i}", 9092, None, ("broker", "controller"))
                                            for i in range(1, brokers + 1)),
        broker_config={**GOOD_BROKERS, **broker_config}, broker_config_differs=differs or {},
        topics=topics or (topic(),), groups=(), discovered_wall=1.8e9)


def settings(producer: dict | None = None, consumer: dict | None = None, fmt: str = "java", client: str = "java",
             **extra) -> ClientSettings:
    return ClientSettings(source="app.properties", format=fmt, client=client, bootstrap=None, connection={},
                          producer={**GOOD_PRODUCER, **(producer or {})},
                          consumer={**GOOD_CONSUMER, **(consumer or {})}, **extra)


def findings(inv: ClusterInventory | None = None, s: ClientSettings | None | str = "good"):
    inv = inv or inventory()
    s = settings() if s == "good" else s
    return audit_findings(inv, s, plan_audit(inv, s))


def about(found, scope: str, setting: str):
    return [f for f in found if f.scope == scope and f.setting == setting]


def test_a_well_configured_cluster_and_client_give_no_finding():
    assert findings() == []


# --- broker scope ---

def test_auto_creation_with_default_rf_1_is_the_e6_finding():
    (f,) = about(findings(inventory(**{"auto.create.topics.enable": "true", "default.replication.factor": "1"})),
                 "broker", "auto.create.topics.enable")
    assert f.severity == "high" and f.text.startswith("auto-created topics get RF 1")
    assert "any broker outage makes them unavailable" in f.text
    # covered by it: no second finding about the default RF
    assert not about(findings(inventory(**{"auto.create.topics.enable": "true", "default.replication.factor": "1"})),
                     "broker", "default.replication.factor")


def test_auto_creation_with_rf_3_defaults_is_only_low_and_off_says_nothing():
    (f,) = about(findings(inventory(**{"auto.create.topics.enable": "true"})), "broker", "auto.create.topics.enable")
    assert f.severity == "low"
    assert not about(findings(), "broker", "auto.create.topics.enable")


def test_default_rf_below_3():
    (f,) = about(findings(inventory(**{"default.replication.factor": "2"})), "broker", "default.replication.factor")
    assert f.severity == "medium" and f.value == 2 and "default.replication.factor=3" in f.text
    assert not about(findings(inventory(**{"default.replication.factor": "3"})), "broker", "default.replication.factor")


def test_broker_min_isr_1():
    (f,) = about(findings(inventory(**{"min.insync.replicas": "1"})), "broker", "min.insync.replicas")
    assert f.severity == "medium" and "min.insync.replicas=2" in f.text
    assert not about(findings(), "broker", "min.insync.replicas")


def test_broker_unclean_election_and_the_topics_that_inherit_it_are_one_finding():
    found = findings(inventory(topic(unclean="true"), **{"unclean.leader.election.enable": "true"}))
    (f,) = about(found, "broker", "unclean.leader.election.enable")
    assert f.severity == "high"
    assert not about(found, "topic", "unclean.leader.election.enable")  # inherited: said once, at the brokers
    assert not about(findings(), "broker", "unclean.leader.election.enable")


def test_offsets_and_transaction_logs_replication():
    found = findings(inventory(**{"offsets.topic.replication.factor": "1",
                                  "transaction.state.log.replication.factor": "1"}))
    assert about(found, "broker", "offsets.topic.replication.factor")[0].severity == "high"
    assert about(found, "broker", "transaction.state.log.replication.factor")[0].severity == "low"  # no transactions
    with_txn = findings(inventory(**{"transaction.state.log.replication.factor": "1"}), settings(transactions=True))
    assert about(with_txn, "broker", "transaction.state.log.replication.factor")[0].severity == "high"
    assert about(findings(inventory(**{"offsets.topic.replication.factor": "2"})), "broker",
                 "offsets.topic.replication.factor")[0].severity == "medium"
    assert not about(findings(), "broker", "offsets.topic.replication.factor")
    assert not about(findings(), "broker", "transaction.state.log.replication.factor")


def test_transaction_log_min_isr_1():
    found = findings(inventory(**{"transaction.state.log.min.isr": "1"}), settings(transactions=True))
    assert about(found, "broker", "transaction.state.log.min.isr")[0].severity == "medium"
    assert not about(findings(), "broker", "transaction.state.log.min.isr")


def test_flush_settings_set_on_the_brokers():
    (f,) = about(findings(inventory(**{"log.flush.interval.messages": "1"})), "broker", "log.flush.interval.messages")
    assert f.severity == "low" and "log.flush.interval.messages=1" in f.text
    assert not [f for f in findings() if "flush" in f.setting]  # Long.MAX_VALUE and unset: Kafka's defaults


def test_fewer_than_3_brokers_and_brokers_that_differ():
    (f,) = about(findings(inventory(brokers=1)), "broker", "brokers")
    assert f.severity == "high" and "1 broker:" in f.text
    (d,) = about(findings(inventory(differs={"min.insync.replicas": {1: "2", 2: "1", 3: None}})), "broker",
                 "min.insync.replicas")
    assert d.value == "broker 1: 2, broker 2: 1, broker 3: not set"
    assert not about(findings(), "broker", "brokers")


# --- client scope ---

@pytest.mark.parametrize("acks, expected", [("1", "acks=1"), ("0", "acks=0"), ("all", None), ("-1", None)])
def test_acks_not_all(acks, expected):
    found = about(findings(s=settings({"acks": acks, "enable.idempotence": "false"})), "client", "acks")
    assert [f.text.split(":")[0] for f in found] == ([expected] if expected else [])
    assert all(f.severity == "high" for f in found)


def test_idempotence_off_explicitly_or_by_the_clients_defaults():
    (f,) = about(findings(s=settings({"enable.idempotence": "false"})), "client", "enable.idempotence")
    assert f.severity == "medium" and "duplicates" in f.text
    librdkafka = settings(client="librdkafka", fmt="librdkafka")
    librdkafka = dataclasses.replace(librdkafka, producer={"acks": "all", "delivery.timeout.ms": "120000"})
    (d,) = about(findings(s=librdkafka), "client", "enable.idempotence")
    assert "client's defaults" in d.text
    assert not about(findings(), "client", "enable.idempotence")


def test_retries_0():
    (f,) = about(findings(s=settings({"retries": "0"})), "client", "retries")
    assert f.severity == "high"
    assert not about(findings(s=settings({"retries": "3"})), "client", "retries")


def test_a_short_delivery_timeout_the_seeds_e1_settings():
    (f,) = about(findings(s=settings({"delivery.timeout.ms": "8000"})), "client", "delivery.timeout.ms")
    assert f.value == 8000 and "8 s" in f.text and f.severity == "medium"
    lib = dataclasses.replace(settings(client="librdkafka"), producer={**GOOD_PRODUCER, "message.timeout.ms": "5000"})
    del lib.producer["delivery.timeout.ms"]
    assert about(findings(s=lib), "client", "message.timeout.ms")
    assert not about(findings(), "client", "delivery.timeout.ms")


def test_reordering_with_many_requests_in_flight_and_no_idempotence():
    found = findings(s=settings({"enable.idempotence": "false", "max.in.flight.requests.per.connection": "5"}))
    assert about(found, "client", "max.in.flight.requests.per.connection")[0].severity == "low"
    one = settings({"enable.idempotence": "false", "max.in.flight.requests.per.connection": "1"})
    assert not about(findings(s=one), "client", "max.in.flight.requests.per.connection")


def test_unknown_keys_are_listed_with_their_line_and_why():
    s = settings(unknown=(UnknownKey("spring.kafka.listener.ack-mode", 12, "a Spring listener container setting"),
                          UnknownKey("spring.kafka.producer.ack", 4, "not a field")))
    (f,) = about(findings(s=s), "client", "unknown keys")
    assert f.value == ["spring.kafka.listener.ack-mode", "spring.kafka.producer.ack"]
    assert "spring.kafka.producer.ack (line 4): not a field" in f.text and f.text.startswith("2 keys of app.properties")
    assert not about(findings(), "client", "unknown keys")


def test_auto_commit_explicit_or_by_default_but_not_springs_listener():
    assert about(findings(s=settings(consumer={"enable.auto.commit": "true"})), "client", "enable.auto.commit")
    defaulted = dataclasses.replace(settings(), consumer={"group.id": "g", "isolation.level": "read_committed"})
    (f,) = about(findings(s=defaulted), "client", "enable.auto.commit")
    assert f.value == "true (default)"
    spring = dataclasses.replace(defaulted, format="spring")
    assert not about(findings(s=spring), "client", "enable.auto.commit")  # Spring's container commits itself
    assert not about(findings(), "client", "enable.auto.commit")


def test_read_uncommitted_consumers_of_transactional_producers():
    found = findings(s=settings(consumer={"isolation.level": "read_uncommitted"}, transactions=True))
    (f,) = about(found, "client", "isolation.level")
    assert f.severity == "high" and "read_committed" in f.text
    no_transactions = settings(consumer={"isolation.level": "read_uncommitted"})
    assert not about(findings(s=no_transactions), "client", "isolation.level")
    assert not about(findings(s=settings(transactions=True)), "client", "isolation.level")


def test_no_client_settings_is_one_note_and_no_guess():
    found = findings(s=None)
    assert [(f.scope, f.setting, f.severity) for f in found] == [("client", "--app-config", "low")]


# --- topic scope ---

def test_rf_1_and_rf_2_topics():
    (f,) = about(findings(inventory(topic(rf=1, min_isr="1", overrides=("x",)))), "topic", "replication_factor")
    assert f.severity == "high" and f.subject == "orders" and "offline" in f.text
    assert about(findings(inventory(topic(rf=2, min_isr="1"))), "topic", "replication_factor")[0].severity == "medium"
    assert not about(findings(), "topic", "replication_factor")


def test_min_isr_1_with_rf_3():
    (f,) = about(findings(inventory(topic(min_isr="1"))), "topic", "min.insync.replicas")
    assert f.severity == "medium" and f.value == 1
    assert not about(findings(), "topic", "min.insync.replicas")


@pytest.mark.parametrize("rf, isr, words", [(3, "3", "any one broker down"), (2, "3", "even with every broker up")])
def test_min_isr_at_or_above_rf_makes_the_topic_unwritable(rf, isr, words):
    (f,) = [f for f in about(findings(inventory(topic(rf=rf, min_isr=isr))), "topic", "min.insync.replicas")
            if f.severity == "high"]
    assert words in f.text and "your producers use acks=all" in f.text
    assert not [f for f in about(findings(inventory(topic(rf=1, min_isr="1"))), "topic", "min.insync.replicas")]


def test_unclean_election_set_on_the_topic():
    (f,) = about(findings(inventory(topic(unclean="true", overrides=("unclean.leader.election.enable",)))),
                 "topic", "unclean.leader.election.enable")
    assert f.severity == "high"
    assert not about(findings(), "topic", "unclean.leader.election.enable")


def test_a_topic_that_looks_auto_created():
    inv = inventory(topic("events", rf=1, partitions=1, min_isr="1", overrides=()),
                    **{"auto.create.topics.enable": "true", "default.replication.factor": "1",
                       "num.partitions": "1", "min.insync.replicas": "1"})
    (f,) = about(findings(inv), "topic", "auto-created")
    assert f.severity == "medium" and "1 partition, RF 1" in f.text
    assert not about(findings(), "topic", "auto-created")


def test_compacted_topics():
    (f,) = about(findings(inventory(topic(cleanup="compact,delete"))), "topic", "cleanup.policy")
    assert f.severity == "medium" and "604800000" in f.text
    assert about(findings(inventory(topic(cleanup="compact"))), "topic", "cleanup.policy")[0].severity == "low"
    assert not about(findings(), "topic", "cleanup.policy")


def test_partitions_offline_or_under_replicated_now():
    (f,) = about(findings(inventory(topic(under=2))), "topic", "partitions")
    assert f.severity == "high" and f.value == "0 offline, 2 under-replicated"
    assert not about(findings(), "topic", "partitions")


def test_topic_flush_overrides_and_internal_topics_are_not_findings():
    found = findings(inventory(topic(overrides=("flush.messages",), **{"flush.messages": "1"})))
    assert about(found, "topic", "flush.messages")[0].severity == "low"
    internal = topic("__consumer_offsets", rf=1, min_isr="1", internal=True)
    assert not [f for f in findings(inventory(topic(), internal)) if f.subject == "__consumer_offsets"]


# --- all ---

def test_order_broker_client_topic_high_first_and_json_ready():
    inv = inventory(topic("a", rf=1, min_isr="1"), topic("b", cleanup="compact"), topic("c", min_isr="3"),
                    **{"auto.create.topics.enable": "true", "default.replication.factor": "1",
                       "min.insync.replicas": "1"})
    found = findings(inv, settings({"acks": "1", "enable.idempotence": "false", "delivery.timeout.ms": "8000"}))
    scopes = [f.scope for f in found]
    assert scopes == sorted(scopes, key=["broker", "client", "topic"].index)
    for scope in ("broker", "client", "topic"):
        ranks = [SEVERITIES.index(f.severity) for f in found if f.scope == scope]
        assert ranks == sorted(ranks) and ranks, scope
    assert [f.subject for f in found if f.scope == "topic" and f.severity == "high"] == ["a", "c"]
    assert json.loads(json.dumps([f.to_dict() for f in found]))[0]["scope"] == "broker"
    assert all(f.text and f.text[-1] not in ".;" and "None" not in f.text for f in found)
