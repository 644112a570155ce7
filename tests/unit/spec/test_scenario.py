"""Scenario validation and the pure parts of the workload (no cluster)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.errors import ScenarioError
from kafkaproof.run.workload import KeyChooser, classify_delivery

pytestmark = pytest.mark.unit

from support import REPO  # noqa: E402
MINIMAL = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}


def write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_catalog_is_valid_and_covers_the_seed_experiments():
    catalog = scenario_mod.load_catalog(REPO / "scenarios")
    names = {s.name for s in catalog}
    for required in ("baseline", "e1-two-nodes-no-failover", "e1-three-nodes-failover", "e3-not-enough-replicas",
                     "e3-broker-down-before-first-send", "e3-broker-down-after-first-send", "e4-unclean-election-on",
                     "e6-rf1-broker-down", "e6-rf3-min-isr-2", "consumer-crash-commit-before", "transactions-aborts"):
        assert required in names
    assert all(s.data["explanation"] for s in catalog), "every catalog scenario explains itself"
    negatives = {s.name for s in catalog if s.expect["outcome"] == "detect"}
    assert {"e4-unclean-election-on", "consumer-crash-commit-before"} <= negatives
    smoke = scenario_mod.load_catalog(REPO / "scenarios", tag="smoke")
    assert {s.expect["outcome"] for s in smoke} == {"pass", "detect"}


def test_published_schema_matches_the_code():
    assert (REPO / "scenarios" / "scenario.schema.json").read_text() == scenario_mod.schema_json()


def test_defaults_are_filled(tmp_path):
    s = scenario_mod.load(write(tmp_path, MINIMAL))
    assert s.data["cluster"]["brokers"] == 3 and s.data["topic"]["name"] == "kp-t"
    assert s.data["consumers"]["group"] == "kp-t"
    assert s.expect == {"outcome": "pass", "detect": []}
    assert len(s.hash()) == 16


def test_duration_replaces_default_message_count(tmp_path):
    s = scenario_mod.load(write(tmp_path, {**MINIMAL, "producers": {"duration_s": 5}}))
    assert "messages" not in s.data["producers"] and s.data["producers"]["duration_s"] == 5


@pytest.mark.parametrize("patch, message", [
    ({"guarantee": "maybe-once"}, "guarantee: 'maybe-once' is not allowed; allowed: at-most-once, at-least-once, exactly-once"),
    ({"producers": {"mesages": 10}}, "producers: unknown field(s) 'mesages'; allowed: bootstrap, client, client_version, config"),
    ({"faults": [{"at": 1, "kind": "explode", "target": "node:1"}]}, "faults.0.kind: 'explode' is not allowed; allowed: kill"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "node:7"}]}, "faults[0].target: node 7 does not exist; nodes are [1, 2, 3]"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "leaderr:0"}]}, "faults[0].target: 'leaderr:0' is not a target"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "leader:3"}]}, "faults[0].target: partition 3 does not exist; the topic has partitions 0..2"),
    ({"faults": [{"at": 1, "kind": "packet_loss", "target": "node:1"}]}, "faults[0].params.percent: required"),
    ({"faults": [{"at": 1, "kind": "isolate", "target": "consumer:0"}]}, "faults[0].kind: 'isolate' cannot target a consumer"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "consumer:3"}]}, "consumers are consumer:0..consumer:0"),
    ({"topic": {"replication_factor": 5}}, "topic.replication_factor: 5 is more than the 3 broker(s)"),
    ({"expect": {"detect": ["gremlins"]}}, "expect"),
    ({"cluster": {"kafka_version": "2.8.1"}}, "cluster.kafka_version: Kafka version '2.8.1' is not supported"),
    ({"cluster": {"image": "apache/kafka:3.9.1"}}, "cluster.image: only the compose backend takes it"),
    ({"cluster": {"compose_file": "my.yml"}}, "cluster.compose_file: only the compose backend takes it"),
    ({"cluster": {"backend": "compose", "image": "apache kafka"}}, "cluster.image: 'apache kafka' does not match"),
    ({"producers": {"transactions": {"batch": 5}, "config": {"enable.idempotence": False}}}, "transactions need idempotence"),
])
def test_errors_name_file_field_and_what_is_allowed(tmp_path, patch, message):
    path = write(tmp_path, {**MINIMAL, **patch})
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(path)
    assert str(path) in str(e.value)
    assert message in str(e.value)


def test_not_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ScenarioError, match="bad.yaml: not valid YAML"):
        scenario_mod.load(bad)
    with pytest.raises(ScenarioError, match="no such scenario file"):
        scenario_mod.load(tmp_path / "nope.yaml")


def test_overrides(tmp_path):
    s = scenario_mod.load(write(tmp_path, {**MINIMAL, "producers": {"duration_s": 5}}))
    o = s.with_overrides(messages=100, kafka_version="3.9.2")
    assert o.data["producers"]["messages"] == 100 and "duration_s" not in o.data["producers"]
    assert o.data["cluster"]["kafka_version"] == "3.9.2" and o.hash() != s.hash()


@pytest.mark.parametrize("error, partition, outcome", [
    (None, 0, "ok"),
    ("_MSG_TIMED_OUT", -1, "fail"),         # never got metadata: never sent
    ("_MSG_TIMED_OUT", 0, "indefinite"),    # may have been in flight
    ("NOT_LEADER_OR_FOLLOWER", 0, "indefinite"),
    ("NOT_ENOUGH_REPLICAS", 0, "indefinite"),
    ("REQUEST_TIMED_OUT", 0, "indefinite"),
    ("MSG_SIZE_TOO_LARGE", 0, "fail"),
    ("_UNKNOWN_TOPIC", -1, "fail"),
])
def test_delivery_outcomes(error, partition, outcome):
    assert classify_delivery(error, partition) == outcome


def test_key_distributions():
    import random
    rng = random.Random(0)
    assert KeyChooser("none").choose(1, rng) is None
    assert KeyChooser("single", key="key").choose(5, rng) == "key"
    assert KeyChooser("sequential", count=3).choose(4, rng) == "k1"
    assert {KeyChooser("uniform", count=2).choose(i, rng) for i in range(50)} == {"k0", "k1"}


def test_overrides_apply_and_are_checked_like_the_file(tmp_path):
    s = scenario_mod.load(write(tmp_path, MINIMAL))
    o = s.with_overrides(messages=7, kafka_version="3.9.2", brokers=5)
    assert (o.data["producers"]["messages"], o.data["cluster"]["kafka_version"], o.data["cluster"]["brokers"]) == \
        (7, "3.9.2", 5)
    assert s.data["cluster"]["brokers"] == 3  # the loaded scenario is unchanged
    with pytest.raises(ScenarioError, match=r"s.yaml \(with brokers=2\): topic.replication_factor: 3 is more than the 2"):
        s.with_overrides(brokers=2)
    with pytest.raises(ScenarioError, match=r"cluster.brokers \(override\): 10 is not allowed; allowed: 1..9"):
        s.with_overrides(brokers=10)
    with pytest.raises(ScenarioError, match="local cluster only"):
        s.with_overrides(brokers=3, bootstrap="kafka-1:9092")
    killer = scenario_mod.load(write(tmp_path, {**MINIMAL, "topic": {"replication_factor": 1},
                                                "faults": [{"at": 1, "kind": "kill", "target": "node:3"}]}))
    with pytest.raises(ScenarioError, match=r"faults\[0\].target: node 3 does not exist"):
        killer.with_overrides(brokers=2)


def test_run_takes_a_catalog_name_and_checks_it_before_anything_starts(tmp_path, capsys):
    """`kafkaproof run NAME` runs the catalog's scenario of that name, as `scenario validate NAME` and
    `batch --scenario NAME` take it; an unknown name, or an override the scenario cannot take, is an
    error (exit 2) before any cluster starts or run directory is made."""
    from kafkaproof import cli
    out = tmp_path / "runs"
    assert cli.main(["run", "e6-rf3-min-isr-2", "--brokers", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(REPO / "scenarios" / "e6-rf3-min-isr-2.yaml") in err, err
    assert "topic.replication_factor: 3 is more than the 2 broker(s)" in err
    assert cli.main(["run", "no-such-scenario", "--out", str(out)]) == 2
    assert "no such file, and no scenario of that name in the catalog" in capsys.readouterr().err
    assert not out.exists()


def test_hash_covers_what_runs_not_the_words_around_it(tmp_path):
    s = scenario_mod.load(write(tmp_path, MINIMAL))
    reworded = scenario_mod.load(write(tmp_path, {**MINIMAL, "tags": ["nightly"], "description": "d",
                                                  "explanation": "e"}))
    assert reworded.hash() == s.hash()
    assert s.with_overrides(messages=11).hash() != s.hash() != s.with_overrides(brokers=4).hash()


@pytest.mark.parametrize("section, prop, hint", [
    ("consumers", "isolation.level", "consumers.isolation_level"),
    ("consumers", "group.id", "consumers.group"),
    ("consumers", "enable.auto.commit", "consumers.commit"),
    ("producers", "transactional.id", "producers.transactions"),
    ("producers", "request.required.acks", "producers.config.acks"),
    ("producers", "bootstrap.servers", "producers.bootstrap"),
])
def test_client_properties_that_duplicate_a_field_are_refused(tmp_path, section, prop, hint):
    doc = {**MINIMAL, section: {**MINIMAL.get(section, {}), "config": {prop: "x"}}}
    with pytest.raises(ScenarioError, match=rf"{section}\.config\.{prop}: .*{hint}"):
        scenario_mod.load(write(tmp_path, doc))


def test_effective_clients_are_resolved_once():
    from kafkaproof.spec.clients import effective_clients
    data = scenario_mod.validate_document(
        {**MINIMAL, "producers": {"count": 2, "config": {"acks": "0"}},
         "consumers": {"count": 1, "isolation_level": "read_uncommitted"}}, "x")
    clients = effective_clients(data)
    assert [(p["index"], p["acks"], p["offsets_from_broker"]) for p in clients["producers"]] == [(0, 0, False), (1, 0, False)]
    assert clients["consumers"][0]["isolation_level"] == "read_uncommitted" and clients["consumers"][0]["group"] == "kp-t"
    txn = scenario_mod.validate_document({**MINIMAL, "producers": {"transactions": {"batch": 5}}}, "x")
    assert effective_clients(txn)["producers"][0] | {"config": {}} == {
        "index": 0, "client": "librdkafka", "acks": -1, "idempotence": True, "transactional": True,
        "offsets_from_broker": True, "config": {}}


@pytest.mark.parametrize("extra, message", [
    ({"faults": [{"at": 1, "kind": "kill", "target": "consumer:0", "after": {"event": "consumer_commit", "consumer": 2}}]},
     r"faults\[0\]\.after\.consumer: consumer 2 does not exist"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "leader:0", "after": {"event": "isr_shrunk"}}]},
     r"faults\[0\]\.after\.partition: required for isr_shrunk"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "leader:0", "after": {"event": "isr_shrunk", "partition": 0,
                                                                            "consumer": 0}}]},
     r"faults\[0\]\.after\.consumer: not a parameter of isr_shrunk"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "leader:0", "after": {"event": "soon"}}]},
     r"faults\.0\.after\.event: 'soon' is not allowed; allowed: consumer_commit, isr_shrunk"),
    ({"exercised": [{"check": "leader_change"}]}, r"exercised\[0\]\.partition: required for leader_change"),
    ({"exercised": [{"check": "leader_change", "partition": 7}]}, r"exercised\[0\]\.partition: partition 7 does not exist"),
    ({"exercised": [{"check": "aborted_in_log"}]}, r"exercised\[0\]\.check: aborted_in_log needs producers.transactions"),
    ({"exercised": [{"check": "isr_shrink", "partition": 0, "before_fault": 3}]},
     r"exercised\[0\]\.before_fault: faults\[3\] does not exist"),
    ({"claims": {"delivery": {}}, "consumers": {"count": 0}}, r"claims\.delivery: needs consumers"),
    ({"claims": {"processed_once": {}}, "consumers": {"count": 0}}, r"claims\.processed_once: needs consumers"),
    ({"claims": {"processed_once": {"within_s": 5}}}, r"claims"),
    ({"claims": {"always": {}}}, r"claims: unknown field\(s\) 'always'; allowed: delivery"),
    ({"producers": {"transactions": {"batch": 5, "abort": "drop"}}},
     r"producers\.transactions\.abort: 'drop' is not allowed; allowed: flush, purge"),
])
def test_triggers_exercised_conditions_and_claims_are_checked(tmp_path, extra, message):
    doc = {**MINIMAL, **extra}
    if "producers" in extra:
        doc["producers"] = {**MINIMAL["producers"], **extra["producers"]}
    with pytest.raises(ScenarioError, match=message):
        scenario_mod.load(write(tmp_path, doc))


def test_timeline_keeps_scenario_positions_and_triggers():
    doc = {**MINIMAL, "faults": [
        {"at": 5, "kind": "kill", "target": "leader:0"},
        {"at": 1, "kind": "kill", "target": "consumer:0", "duration": 1,
         "after": {"event": "consumer_commit", "consumer": 0, "delay_s": 0.1}}]}
    scn = scenario_mod.Scenario("t", "x", scenario_mod.validate_document(doc, "x"))
    first, second = scn.timeline()
    assert (first.index, first.at, second.index) == (1, 1, 0)
    assert first.after["event"] == "consumer_commit" and first.trigger_timeout_s == 60
    assert first.describe() == "kill consumer:0 at 1s after consumer_commit 0 + 0.1s for 1s"
    assert scenario_mod.Scenario("t", "x", scenario_mod.validate_document(
        {**MINIMAL, "claims": {"delivery": {}}}, "x")).claims == {"delivery": {"within_s": 60.0}}


def test_claims_and_exercised_do_not_change_the_hash_of_scenarios_without_them():
    plain = scenario_mod.Scenario("t", "x", scenario_mod.validate_document(MINIMAL, "x"))
    assert "claims" not in plain.data and "exercised" not in plain.data


def test_a_client_override_switches_every_worker_and_drops_the_other_clients_version(tmp_path):
    s = scenario_mod.load(write(tmp_path, {**MINIMAL, "producers": {"client": "java", "client_version": "3.9.2"}}))
    rd = s.with_overrides(client="librdkafka")
    assert rd.data["producers"]["client"] == "librdkafka" and rd.data["consumers"].get("client", "librdkafka") == "librdkafka"
    assert s.with_overrides(client="java").data["consumers"]["client"] == "java"
    assert "client_version" not in rd.data["producers"] and rd.hash() != s.hash()  # history keeps them apart
    assert s.with_overrides(client="java").data["producers"]["client_version"] == "3.9.2"
    with pytest.raises(ScenarioError, match="producers.client \\(override\\): 'go' is not allowed; allowed: librdkafka, java"):
        s.with_overrides(client="go")


def test_an_application_claiming_processed_once_needs_a_processed_source():
    doc = {"name": "app", "guarantee": "at-least-once", "claims": {"processed_once": {}},
           "application": {"services": [{"name": "svc", "command": ["sh"], "ready": {"log": "up"}}],
                           "drive": {"request": {"url": "http://127.0.0.1:9/e"}, "rate": 1, "messages": 1},
                           "identity": {"key": True}}}
    with pytest.raises(ScenarioError, match=r"claims\.processed_once: needs application\.processed"):
        scenario_mod.validate_document(doc, "x")
    doc["application"]["processed"] = {"http": {"url": "http://127.0.0.1:9/processed", "mode": "log"}}
    assert "processed_once" in scenario_mod.validate_document(doc, "x")["claims"]
