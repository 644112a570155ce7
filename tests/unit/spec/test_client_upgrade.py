"""Client upgrades in the upgrade check: the client-version override, the defaults diff, the facts the upgrade
page shows about each side's clients, and the plan and CLI that ask for them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.run.client_upgrade import client_upgrade_facts, java_versions
from kafkaproof.spec.client_upgrade import (DRIVER_SET, NO_DEFAULT, DefaultChange, default_changes, scenario_set,
                                            with_client_version)
from kafkaproof.spec.client_versions import ClientVersion, ProcessClient

pytestmark = pytest.mark.unit


def defaults(version: str, producer: dict, consumer: dict | None = None, admin: dict | None = None) -> dict:
    def role(d: dict | None) -> dict:
        return {k: ({"type": "STRING"} if v is NO_DEFAULT else {"type": "STRING", "default": v})
                for k, v in (d or {}).items()}
    return {"version": version, "producer": role(producer), "consumer": role(consumer), "admin": role(admin)}


OLD = defaults("3.9.2", {"linger.ms": "0", "acks": "all", "bootstrap.servers": NO_DEFAULT, "gone.one": "1",
                         "client.id": ""},
               {"group.protocol": "classic", "auto.offset.reset": "latest", "max.poll.records": "500"},
               {"enable.metrics.push": "true"})
NEW = defaults("4.3.1", {"linger.ms": "5", "acks": "all", "bootstrap.servers": NO_DEFAULT, "new.one": None,
                         "client.id": ""},
               {"group.protocol": "classic", "auto.offset.reset": "earliest", "max.poll.records": "100"},
               {"enable.metrics.push": "false"})


def test_default_changes_lists_what_differs_and_what_only_one_version_has():
    d = default_changes(OLD, NEW)
    assert (d.current, d.candidate) == ("3.9.2", "4.3.1")
    assert [c.text() for c in d.changed] == ["producer linger.ms: 0 → 5",
                                             "consumer auto.offset.reset: latest → earliest",
                                             "consumer max.poll.records: 500 → 100",
                                             "admin enable.metrics.push: true → false"]
    assert d.only_current == {"producer": ["gone.one"]} and d.only_candidate == {"producer": ["new.one"]}
    assert d.only_count == 2 and d.set_here == []
    assert json.loads(json.dumps(d.to_json()))["changed"][0] == {"role": "producer", "name": "linger.ms",
                                                                 "current": "0", "candidate": "5"}


def test_a_property_the_scenario_or_the_driver_sets_is_not_a_default_that_changes_for_it():
    scenario = {"producers": {"config": {"linger.ms": 20, "acks": "all", "compression.type": None}},
                "consumers": {"config": {}, "batch": 10}}
    set_here = scenario_set(scenario)
    assert {"linger.ms", "acks", "bootstrap.servers"} <= set_here["producer"]
    assert "compression.type" not in set_here["producer"]  # null: the client's default
    assert {"auto.offset.reset", "max.poll.records", "group.id"} <= set_here["consumer"]
    assert set_here["admin"] == DRIVER_SET["admin"]
    d = default_changes(OLD, NEW, set_here)
    assert [c.text() for c in d.changed] == ["admin enable.metrics.push: true → false"]
    assert {c.name for c in d.set_here} == {"linger.ms", "auto.offset.reset", "max.poll.records"}


def test_no_default_and_a_null_default_are_different_defaults():
    a = defaults("1", {"x": NO_DEFAULT, "y": None})
    b = defaults("2", {"x": None, "y": None})
    assert default_changes(a, b).changed == [DefaultChange("producer", "x", NO_DEFAULT, None)]
    assert default_changes(a, b).changed[0].text() == "producer x: (no default) → null"


SCENARIO = {"cluster": {"kafka_version": "4.3.1"}, "producers": {"count": 1, "client": "librdkafka", "config": {}},
            "consumers": {"count": 2, "config": {}}}


def test_with_client_version_puts_every_producer_and_consumer_on_that_kafka_clients():
    out = with_client_version(SCENARIO, "3.9.2", "s.yaml")
    assert out["producers"]["client"] == out["consumers"]["client"] == "java"
    assert out["producers"]["client_version"] == out["consumers"]["client_version"] == "3.9.2"
    assert SCENARIO["producers"]["client"] == "librdkafka"  # the input is not changed


def test_with_client_version_refuses_what_that_client_cannot_run_naming_the_field_and_version():
    with pytest.raises(ScenarioError, match=r"producers.client_version \(override\).*2.8.0"):
        with_client_version(SCENARIO, "2.8.0", "s.yaml")
    # the consumers' group protocol is checked again on the new client (kafka-clients has it from 3.7)
    bad_protocol = {**SCENARIO, "consumers": {"count": 2, "config": {"group.protocol": "nope"}}}
    with pytest.raises(ScenarioError, match=r"client_version=4.3.1.*consumers.config.group.protocol"):
        with_client_version(bad_protocol, "4.3.1", "s.yaml")
    new_protocol = {**SCENARIO, "consumers": {"count": 2, "config": {"group.protocol": "consumer"}}}
    assert with_client_version(new_protocol, "3.9.2", "s.yaml")["consumers"]["client_version"] == "3.9.2"
    with pytest.raises(ScenarioError, match="application scenario"):
        with_client_version({**SCENARIO, "application": {"drive": {}}}, "4.3.1", "s.yaml")


def test_the_upgrade_plan_runs_each_side_on_its_client_version():
    from kafkaproof import batch
    from kafkaproof.run.resolved import Overrides
    from kafkaproof.spec.scenario import Scenario
    base = Scenario("base", "base.yaml", {"producers": {}, "consumers": {}})
    plan = batch.upgrade_plan([], [base], "4.3.1", "4.3.1", Overrides(messages=10), clients=("3.9.2", "4.3.1"))
    assert [(r.label, r.overrides.kafka_version, r.overrides.client_version) for r in plan.runs] == [
        ("current", "4.3.1", "3.9.2"), ("candidate", "4.3.1", "4.3.1")]
    with pytest.raises(ScenarioError, match="current and the candidate"):
        batch.upgrade_plan([], [base], "4.3.1", "4.3.1", clients=("3.9.2", ""))


def test_the_cli_reads_a_client_upgrade_pair():
    from kafkaproof.upgrade_cli import client_upgrade_pair
    assert client_upgrade_pair("3.9.2:4.3.1") == ("3.9.2", "4.3.1") and client_upgrade_pair(None) is None
    with pytest.raises(ScenarioError, match="CURRENT:CANDIDATE"):
        client_upgrade_pair("4.3.1")


def java(version: str, index: int = 0, role: str = "producers") -> ProcessClient:
    return ProcessClient(role, index, "java", (ClientVersion("kafka-clients", version),))


def test_java_versions_of_a_run():
    rdk = ProcessClient("consumers", 0, "librdkafka", (ClientVersion("librdkafka", "2.16.0"),))
    assert java_versions([java("4.3.1"), java("3.9.2", 1), rdk, java("4.3.1", 0, "consumers")]) == ["3.9.2", "4.3.1"]


def write_manifest(run_dir: Path, version: str | None, config: dict) -> Path:
    run_dir.mkdir(parents=True)
    client = {"index": 0, "client": "java", "libraries": [{"name": "kafka-clients", "version": version}]} \
        if version else {"index": 0, "client": "librdkafka",
                         "libraries": [{"name": "librdkafka", "version": "2.16.0"}]}
    (run_dir / "manifest.json").write_text(json.dumps({
        "run_id": run_dir.name, "scenario": {"producers": {"config": config}, "consumers": {"config": {}}},
        "client_versions": {"producers": [client], "consumers": []}}))
    return run_dir


def side(name: str, label: str, run_dir: Path | None) -> dict:
    return {"scenario": name, "label": label, "run_dir": str(run_dir) if run_dir else None, "verdict": "pass"}


def test_client_upgrade_facts_diff_each_scenario_on_its_own_settings(tmp_path):
    read = []

    def jar(version: str) -> dict:
        read.append(version)
        return {"3.9.2": OLD, "4.3.1": NEW}[version]

    summaries = [side("a", "current", write_manifest(tmp_path / "a1", "3.9.2", {"linger.ms": 0})),
                 side("a", "candidate", write_manifest(tmp_path / "a2", "4.3.1", {"linger.ms": 0})),
                 side("b", "current", write_manifest(tmp_path / "b1", "3.9.2", {})),
                 side("b", "candidate", write_manifest(tmp_path / "b2", "4.3.1", {})),
                 side("c", "current", write_manifest(tmp_path / "c1", None, {})),  # librdkafka on both sides
                 side("c", "candidate", write_manifest(tmp_path / "c2", None, {})),
                 side("d", "current", None), side("d", "candidate", None),  # never ran
                 side("r", "rolling", tmp_path / "nothing")]
    facts = client_upgrade_facts(summaries, jar)
    assert sorted(read) == ["3.9.2", "4.3.1"]  # each jar read once
    a, b, c = (facts["scenarios"][k] for k in "abc")
    assert "d" not in facts["scenarios"]
    assert a["java"] == {"current": "3.9.2", "candidate": "4.3.1"}
    assert "linger.ms" not in {x["name"] for x in a["diff"]["changed"]}  # scenario a sets it
    assert "linger.ms" in {x["name"] for x in b["diff"]["changed"]}
    assert a["clients"] == {"current": ["producer 0: kafka-clients 3.9.2"],
                            "candidate": ["producer 0: kafka-clients 4.3.1"]}
    assert c["diff"] is None and c["clients"]["current"] == ["producer 0: librdkafka 2.16.0"]
    assert [(v["current"], v["candidate"]) for v in facts["versions"]] == [("3.9.2", "4.3.1")]
    assert "linger.ms" in {x["name"] for x in facts["versions"][0]["changed"]}  # the full diff leaves nothing out


def test_client_upgrade_facts_say_when_a_jar_cannot_be_read(tmp_path):
    from kafkaproof.run.java_driver import JavaDriverError

    def broken(version: str) -> dict:
        raise JavaDriverError("no java")

    summaries = [side("a", "current", write_manifest(tmp_path / "a1", "3.9.2", {})),
                 side("a", "candidate", write_manifest(tmp_path / "a2", "4.3.1", {}))]
    fact = client_upgrade_facts(summaries, broken)["scenarios"]["a"]
    assert fact["diff"] is None and "kafka-clients 3.9.2's defaults could not be read: no java" in fact["error"]
