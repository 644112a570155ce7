"""One resolution (`run.resolved.resolve` → `ResolvedScenario`) and one batch plan (`kafkaproof.batch`), no cluster."""
from __future__ import annotations

import json

import pytest
import yaml

from kafkaproof import batch, pipeline
from kafkaproof.errors import KafkaproofError, ScenarioError
from kafkaproof.cluster.reuse import cluster_key
from kafkaproof.run.resolved import Overrides, ResolvedScenario, resolve
from kafkaproof.spec.scenario import Scenario, validate_document

pytestmark = pytest.mark.unit

RANDOM = {"kinds": [{"kind": "kill"}, {"kind": "pause"}], "interval_s": [0.5, 4], "duration_s": [1, 3]}


def scn(name: str, **fields) -> Scenario:
    doc = {"name": name, "guarantee": "at-least-once", "producers": {"messages": 10},
           "topic": {"replication_factor": 1}, **fields}
    return Scenario(name, f"{name}.yaml", validate_document(doc, name))


def test_a_scenario_is_resolved_once_with_its_overrides_schedule_environment_and_cluster_key(monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_EXTRA_PRODUCER_CONFIG", '{"linger.ms": 7}')
    random = scn("r", producers={"messages": 15000, "rate": 500}, faults={"random": RANDOM})
    resolved = resolve(random, Overrides(messages=12000, brokers=3, seed=5))
    data = resolved.scenario.data
    assert data["producers"]["messages"] == 12000 and data["cluster"]["brokers"] == 3
    assert data["random_faults"]["seed"] == 5 and data["faults"]  # drawn here, not where it runs
    assert data["producers"]["config"]["linger.ms"] == 7 and resolved.environment_overrides == {
        "producers": {"linger.ms": 7}}
    assert resolved.scenario_hash == random.with_overrides(messages=12000, brokers=3).hash()  # not one draw's
    assert resolved.cluster_key == cluster_key(random.with_overrides(brokers=3))
    assert resolved.cluster_config("af-x").brokers == 3 and resolved.cluster_config("af-x").name == "af-x"
    # it crosses XCom as JSON and comes back the same: the run does not draw or check again
    again = ResolvedScenario.from_dict(json.loads(json.dumps(resolved.to_dict())))
    assert again == resolved and again.bootstrap is None
    existing = resolve(scn("e"), Overrides(bootstrap="k1:9092"))
    assert existing.bootstrap == "k1:9092" and existing.overrides.to_dict() == {"bootstrap": "k1:9092"}
    with pytest.raises(ScenarioError, match="1 broker"):
        resolve(scn("s", topic={"replication_factor": 3}), Overrides(brokers=1))
    monkeypatch.setenv("KAFKAPROOF_EXTRA_PRODUCER_CONFIG", "not json")
    with pytest.raises(KafkaproofError, match="environment: KAFKAPROOF_EXTRA_PRODUCER_CONFIG"):
        resolve(scn("e"))


def test_a_suite_by_name_reads_only_the_named_files(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text("name: s\nguarantee: at-least-once\nproducers: {messages: 10}\n")
    (tmp_path / "file-name.yaml").write_text("name: other-name\nguarantee: at-least-once\nproducers: {messages: 10}\n")
    (tmp_path / "broken.yaml").write_text("name: broken\nguarantee: sometimes\n")
    monkeypatch.setenv("KAFKAPROOF_SCENARIOS", str(tmp_path))
    assert [s.name for s in pipeline.suite(names=["s"])] == ["s"]  # the broken file is not read
    assert pipeline.suite(names=[]) == []
    with pytest.raises(ScenarioError, match="broken.yaml"):  # a name its file does not carry: the catalog is read
        pipeline.suite(names=["other-name"])
    (tmp_path / "broken.yaml").unlink()
    assert [s.name for s in pipeline.suite(names=["other-name", "s"])] == ["other-name", "s"]
    with pytest.raises(KafkaproofError, match=r"unknown scenarios \['nope'\]"):
        pipeline.suite(names=["nope"])


def test_a_suite_plan_puts_runs_asking_for_the_same_cluster_together_and_says_which_may_keep_it():
    a, b, c, d = scn("a"), scn("b", cluster={"brokers": 1}), scn("c"), scn("d", cluster={"brokers": 2})
    plan = batch.suite_plan([a, b, c, d])
    assert [(r.name, r.keep_for_next) for r in plan.runs] == [("a", True), ("c", False), ("b", False), ("d", False)]
    assert plan.page == "batch" and {r.overrides for r in plan.runs} == {Overrides()}


def test_a_matrix_plan_runs_each_scenario_once_per_client_and_shows_them_side_by_side():
    a, b = scn("a"), scn("b")
    plan = batch.matrix_plan([a, b], ["librdkafka", "java"], Overrides(messages=5))
    rdkafka, java = Overrides(messages=5, client="librdkafka"), Overrides(messages=5, client="java")
    assert [(r.name, r.label, r.overrides) for r in plan.runs] == [
        ("a", "librdkafka", rdkafka), ("a", "java", java), ("b", "librdkafka", rdkafka), ("b", "java", java)]
    assert plan.page == "clients"
    assert batch.matrix_plan([a], ["java"]).page == batch.matrix_plan([a]).page == "batch"
    assert [(r.label, r.overrides) for r in batch.matrix_plan([a, b]).runs] == [("", Overrides())] * 2


def test_an_upgrade_plan_rolls_first_at_its_own_scale_then_runs_either_version():
    roll, base = scn("roll"), scn("base")
    plan = batch.upgrade_plan([roll], [base], "3.9.2", "4.3.1", Overrides(messages=100, brokers=3))
    assert plan.page == "upgrade"
    assert [(r.name, r.label, r.overrides) for r in plan.runs] == [
        ("roll", "rolling", Overrides(kafka_version="3.9.2", brokers=3, upgrade_to="4.3.1")),
        ("base", "current", Overrides(messages=100, kafka_version="3.9.2", brokers=3)),
        ("base", "candidate", Overrides(messages=100, kafka_version="4.3.1", brokers=3))]


def test_each_run_of_a_plan_is_resolved_once_or_refused_with_its_reason():
    ok, refused = batch.BatchPlan([batch.PlannedRun(scn("a"), "x"),
                                   batch.PlannedRun(scn("b", topic={"replication_factor": 3}), "y",
                                                    Overrides(brokers=1))]).resolved_items()
    assert ok["scenario"] == "a" and ok["label"] == "x" and ResolvedScenario.from_dict(ok["resolved"]).name == "a"
    assert refused["scenario"] == "b" and refused["label"] == "y" and "1 broker(s)" in refused["error"]
    run = batch.run_resolved(refused, "batch/1")  # nothing starts
    assert (run["status"], run["run_dir"], run["label"]) == ("error", None, "y")
    yaml.safe_dump(ok)  # plain data: it crosses XCom


def summary(name, verdict, **kw):
    return {"scenario": name, "run_id": f"{name}-1", "verdict": verdict, "expect": "pass", "violations": [],
            "regressions": [], "error": None, "report": f"/runs/{name}/report.html", **kw}


def test_a_judged_batch_is_one_gate_outcome_whatever_ran_it(monkeypatch):
    monkeypatch.setattr(pipeline, "write_batch_report", lambda summaries, batch_id, out=None: "/runs/batch.html")
    monkeypatch.setattr(pipeline, "write_client_report", lambda summaries, batch_id, out=None: ("/runs/clients.html", ["a: x"]))
    monkeypatch.setattr(pipeline, "write_upgrade_report", lambda summaries, batch_id, out=None: ("/runs/upgrade.html", []))
    passed = batch.judge_batch([summary("a", "pass", warnings=["slow"])], "b/1", "batch", fault_results=[None])
    assert passed.ok and passed.report == "/runs/batch.html" and passed.lines == [
        "summary report: /runs/batch.html", "fault tasks: none injected",
        f"  {'a':<36} pass   /runs/a/report.html", "      warning: slow (no baseline)", "reliability gate passed"]
    failed = batch.judge_batch([summary("a", "fail", violations=["lost: 3"]), None], "b/1", "clients")
    assert not failed.ok and failed.page == "clients" and failed.differences == ["a: x"]
    assert failed.lines[0] == "clients differ:\n  a: x" and failed.lines[1] == "summary report: /runs/clients.html"
    assert failed.lines[-3:] == ["reliability gate failed:", *(f"  {p}" for p in failed.problems)]
    assert failed.failure().startswith("reliability gate failed:\n  a (a-1): guarantee violated: lost: 3")
    assert failed.failure().endswith("\nsummary: /runs/clients.html")
    upgrade = batch.judge_batch([summary("a", "pass")], "b/1", "upgrade")
    assert upgrade.ok and upgrade.lines == ["upgrade report: /runs/upgrade.html"]
    with pytest.raises(ValueError, match="page 'night'"):
        batch.judge_batch([], "b/1", "night")


APP_PAIR = ["app-e6-answer-before-ack", "app-e6-wait-for-ack"]


def test_the_manual_and_upgrade_plans_take_application_scenarios_without_building_the_example(monkeypatch):
    """What the DAGs do before a run (read the catalog, resolve each run) never builds the example application:
    the run that starts its services does."""
    from kafkaproof.run import example_app

    def no_build(*_a, **_k):
        raise AssertionError("the example application was built before a run started its services")

    monkeypatch.setattr(example_app, "build", no_build)
    assert APP_PAIR[0] in [s.name for s in pipeline.suite()]  # the manual DAG's scenario choices
    manual = batch.matrix_plan(pipeline.suite(names=APP_PAIR), None, Overrides(kafka_version="4.3.1")).resolved_items()
    assert [item["scenario"] for item in manual] == APP_PAIR and not [i for i in manual if "error" in i]
    # the upgrade check varies the Kafka version (and the scale: the drive's messages) of an application's run
    upgrade = batch.upgrade_plan([], pipeline.suite(names=APP_PAIR[1:]), "3.9.2", "4.3.1",
                                 Overrides(messages=200)).resolved_items()
    assert [(i["label"], i.get("error")) for i in upgrade] == [("current", None), ("candidate", None)]
    sides = [ResolvedScenario.from_dict(i["resolved"]).scenario.data for i in upgrade]
    assert [d["cluster"]["kafka_version"] for d in sides] == ["3.9.2", "4.3.1"]
    assert all(d["application"]["drive"]["messages"] == 200 and "duration_s" not in d["application"]["drive"]
               for d in sides)
    assert all("{example_app:signup-service}" in d["application"]["services"][0]["command"] for d in sides)
