"""Results history, regression rules and the gate, without a cluster."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kafkaproof import batch, pipeline
from kafkaproof.cluster import reuse, state
from kafkaproof.errors import KafkaproofError
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.verdict import history

pytestmark = pytest.mark.unit


def metrics(recovery=5.0, p99=20.0, unavailable=3.0, **anomalies):
    return {"recovery_s": recovery, "publish_p99_ms": p99, "unavailable_s": unavailable, "anomalies": anomalies}


def test_history_records_and_lists_runs(tmp_path):
    url = f"sqlite:///{tmp_path}/h.sqlite"
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for i in range(3):
        history.record({"scenario": "s", "run_id": f"r{i}", "kafka_version": "4.3.1", "verdict": "pass",
                        "finished_at": t0 + timedelta(days=i), "metrics": metrics(recovery=i)}, url)
    history.record({"scenario": "s", "run_id": "r1", "kafka_version": "4.3.1", "verdict": "fail",
                    "finished_at": t0 + timedelta(days=1), "metrics": metrics()}, url)  # replaces r1
    rows = history.runs("s", url=url)
    assert [r["run_id"] for r in rows] == ["r2", "r1", "r0"]
    assert [r["run_id"] for r in history.runs("s", verdict="pass", url=url)] == ["r2", "r0"]
    assert rows[0]["metrics"]["recovery_s"] == 2
    text = history.format_trend(rows)
    assert text.splitlines()[1].startswith("2026-11-01") and "fail" in text


def summary(name, verdict, expect="pass", **kw):
    return {"scenario": name, "run_id": f"{name}-1", "verdict": verdict, "expect": expect, "violations": [],
            "regressions": [], "error": None, **kw}


def test_gate_lists_every_problem():
    ok, problems = pipeline.gate([summary("a", "pass"), summary("b", "pass")])
    assert ok and problems == []
    ok, problems = pipeline.gate([
        summary("a", "fail", violations=["lost: 3 acknowledged values are not in the log"]),
        summary("b", "fail", expect="detect", violations=["lost: expected, found 0"]),
        summary("c", "error", error="run incomplete: interrupted"),
        summary("d", "pass", regressions=["recovery_s 9.0 vs median 5.0"]), None])
    assert not ok
    assert problems[0].startswith("a (a-1): guarantee violated: lost: 3")
    assert problems[1].startswith("b (b-1): negative control not detected")
    assert "c (c-1): error: run incomplete" in problems[2]
    assert "d (d-1): regression: recovery_s" in problems[3]
    assert "no summary" in problems[4]


def test_upgrade_differences():
    cur = summary("s", "pass", label="current", kafka_version="3.9.2", metrics=metrics(recovery=5))
    cand = summary("s", "fail", label="candidate", kafka_version="4.3.1", metrics=metrics(recovery=5))
    assert pipeline.upgrade_differences([cur, cand]) == ["s: pass on 3.9.2 but fail on 4.3.1"]
    slower = dict(cand, verdict="pass", metrics=metrics(recovery=20))
    (worse,) = pipeline.upgrade_differences([cur, slower])
    assert "recovery_s 20.0" in worse
    assert pipeline.upgrade_differences([cur, dict(cand, verdict="pass")]) == []


def test_cluster_names_are_short_and_distinct():
    a = reuse.cluster_name_for("kafka_reliability_nightly/manual__2026-11-22T02:00:00+00:00", "baseline")
    b = reuse.cluster_name_for("kafka_reliability_nightly/manual__2026-11-22T02:00:00+00:00", "e1")
    assert a != b and a.startswith("af-") and len(a) <= 31


def test_pipeline_clusters_get_the_proxy_a_scenario_needs():
    from kafkaproof.spec.cluster import cluster_config
    (scn,) = pipeline.suite(names=["lost-acks-idempotence-off"])
    assert cluster_config(scn.data, "af-x").proxy is True
    (plain,) = pipeline.suite(names=["baseline"])
    assert cluster_config(plain.data, "af-y").proxy is False


def test_a_scenario_that_cannot_take_the_overrides_is_an_error_summary_before_anything_starts(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text("name: s\nguarantee: at-least-once\nproducers: {messages: 10}\n")
    monkeypatch.setenv("KAFKAPROOF_SCENARIOS", str(tmp_path))
    (scn,) = pipeline.suite(names=["s"])
    run = batch.run_resolved(batch.resolve_run(batch.PlannedRun(scn, "current", Overrides(brokers=1))), "batch/1")
    assert run["status"] == "error" and run["run_dir"] is None and pipeline.analyzable([run, None]) == []
    summary = pipeline.judge(run, "batch/1")
    assert summary["verdict"] == "error" and summary["run_dir"] is None and summary["label"] == "current"
    assert "topic.replication_factor: 3 is more than the 1 broker(s)" in summary["error"]
    ok, problems = pipeline.gate([summary])
    assert not ok and "replication_factor" in problems[0]
    # the same check the nightly DAG's provision task makes
    assert pipeline.refusal(scn) is None
    assert "1 broker(s)" in pipeline.refusal(scn, Overrides(brokers=1))


def test_regression_baseline_is_runs_of_the_same_configuration(tmp_path):
    url = f"sqlite:///{tmp_path}/h.sqlite"
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for i, h in enumerate(("aaaa", "aaaa", "bbbb")):
        history.record({"scenario": "s", "run_id": f"r{i}", "kafka_version": "4.3.1", "verdict": "pass",
                        "scenario_hash": h, "finished_at": t0 + timedelta(days=i), "metrics": metrics()}, url)
    assert [r["run_id"] for r in history.runs("s", scenario_hash="aaaa", url=url)] == ["r1", "r0"]
    assert "bbbb" in history.format_trend(history.runs("s", url=url)).splitlines()[3]


def test_a_batch_that_judged_nothing_fails_the_gate():
    ok, problems = pipeline.gate([])
    assert not ok and "no scenario ran" in problems[0]


def test_fault_tasks_are_named_after_their_fault_and_time():
    by_name = {s.name: s for s in pipeline.suite("full")}
    assert pipeline.fault_task_ids(by_name["baseline"]) == []
    assert pipeline.fault_task_ids(by_name["e3-acks-1-leader-kill"]) == [
        "isolate_followers_0_at_5s_for_3s", "kill_leader_0_at_7s_for_10s"]
    assert pipeline.fault_task_ids(by_name["e3-not-enough-replicas"]) == [
        "kill_follower_0_at_5s_for_16s", "kill_follower_0_at_5500ms_for_15500ms"]
    assert pipeline.fault_task_ids(by_name["consumer-crash-commit-before"]) == [
        "kill_consumer_0_at_7s_after_consumer_commit_for_1s", "kill_consumer_0_at_13s_after_consumer_commit_for_1s"]
    assert pipeline.fault_task_ids(by_name["e3-broker-down-before-first-send"]) == ["stop_node_1_at_0s"]
    once = by_name["e4-min-isr-3"]
    twice = type(once)(once.name, once.path, once.data | {"faults": once.data["faults"] * 2})
    assert pipeline.fault_task_ids(twice) == [
        "kill_follower_0_at_5s_for_10s", "kill_follower_0_at_5s_for_10s_2"]


def test_fault_timing_leaves_out_triggered_faults():
    results = [{"late_ms": 20.0}, {"late_ms": 40.0}, {"late_ms": 300.0}, {"late_ms": 5000.0, "triggered": True}, None]
    assert pipeline.fault_timing(results) == ("fault tasks: 4 injected; the 3 at a fixed time began 40 ms late "
                                              "(median), 300 ms at most; 1 waited for their trigger")
    assert pipeline.fault_timing([{"late_ms": 9.0, "triggered": True}]) == "fault tasks: 1 injected; 1 waited for their trigger"
    assert pipeline.fault_timing([None]) is None


def test_scenarios_asking_for_the_same_cluster_share_a_name_and_run_next_to_each_other(tmp_path):
    from kafkaproof.spec.scenario import Scenario, validate_document

    def scn(name, **cluster):
        doc = {"name": name, "guarantee": "at-least-once", "producers": {"messages": 10},
               "topic": {"replication_factor": 1}, "cluster": cluster}
        return Scenario(name, None, validate_document(doc, name))

    a, b, c, d = scn("a"), scn("b", brokers=1), scn("c"), scn("d", brokers=3, config={"num.io.threads": 4})
    assert reuse.cluster_key(a) == reuse.cluster_key(c) != reuse.cluster_key(b)
    assert reuse.cluster_key(d) != reuse.cluster_key(a)
    key_a, key_c = reuse.cluster_key(a), reuse.cluster_key(c)
    assert reuse.shared_cluster_name("n/1", key_a) == reuse.shared_cluster_name("n/1", key_c)
    assert reuse.shared_cluster_name("n/1", key_a) != reuse.shared_cluster_name("n/2", key_a)
    assert [s.name for s in reuse.reuse_order([a, b, c, d, scn("e", brokers=1)])] == ["a", "c", "b", "e", "d"]


def test_a_pipeline_clusters_owner_is_gone_when_its_dag_run_no_longer_runs(tmp_path, monkeypatch):
    """Whose pipeline cluster may be reclaimed: a DAG run of this Airflow that is not queued/running (or unknown
    to it), one of this DAG run left by an earlier scenario, one of another Airflow whose last task process is
    dead and which nothing touched for 10 minutes, one without an owner left as long."""
    import os
    import time
    from kafkaproof.cluster import state
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("AIRFLOW_HOME", "/srv/airflow")
    owner = pipeline.pipeline_owner("kafka_reliability_nightly/scheduled__2026-11-25T02:00:00+00:00")
    assert (owner["dag_id"], owner["run_id"]) == ("kafka_reliability_nightly", "scheduled__2026-11-25T02:00:00+00:00")
    assert owner["pid"] == os.getpid() and owner["pid_start"] and owner["airflow_home"] == "/srv/airflow"
    state.save_state("af-1", state.ClusterState.from_json({"name": "af-1", "owner": owner}))
    runs = {}

    def dagrun_state(o):
        return runs.get(o["run_id"])

    for run_state, gone in (("running", None), ("queued", None),
                            ("failed", f"its DAG run {owner['batch']} is failed"),
                            ("success", f"its DAG run {owner['batch']} is success"),
                            (None, f"its DAG run {owner['batch']} is not in this Airflow's metadata database")):
        runs[owner["run_id"]] = run_state
        assert pipeline.owner_gone("af-1", dagrun_state) == gone
    assert pipeline.owner_gone("af-1", dagrun_state, own_batch=owner["batch"]) == \
        "an earlier scenario of this DAG run left it"
    # another Airflow's cluster: its recorded task process (this one) is alive
    monkeypatch.setenv("AIRFLOW_HOME", "/elsewhere")
    assert pipeline.owner_gone("af-1", dagrun_state) is None
    state.save_state("af-1", state.ClusterState.from_json({"name": "af-1", "owner": {**owner, "pid": 2 ** 22 - 1}}))
    assert pipeline.owner_gone("af-1", dagrun_state) is None  # dead, but touched just now
    old = time.time() - 601
    os.utime(state.state_path("af-1"), (old, old))
    assert "is gone and nothing touched it for 10 min" in pipeline.owner_gone("af-1", dagrun_state)
    state.save_state("af-2", state.ClusterState.from_json({"name": "af-2"}))  # no owner: an older kafkaproof's
    assert pipeline.owner_gone("af-2") is None
    os.utime(state.state_path("af-2"), (old, old))
    assert pipeline.owner_gone("af-2") == "no owner recorded and nothing touched it for 10 min"
    # while the owner lives, a cluster task raises HostBusy at once instead of waiting in the pool
    runs[owner["run_id"]] = "running"
    monkeypatch.setenv("AIRFLOW_HOME", "/srv/airflow")
    state.save_state("af-1", state.ClusterState.from_json({"name": "af-1", "owner": owner}))
    state.remove_state("af-2")
    with pytest.raises(pipeline.HostBusy, match="af-1"):
        pipeline.wait_for_exclusive_host("af-3", dagrun_state=dagrun_state, wait=False)


def test_a_compose_project_param_needs_the_acknowledgement_and_no_other_cluster():
    assert pipeline.attach_overrides(None, False) == {}
    with pytest.raises(KafkaproofError, match="compose_project 'shop': .*set i_understand_faults_hit_this_cluster"):
        pipeline.attach_overrides("shop", False)
    with pytest.raises(KafkaproofError, match="leave out bootstrap"):
        pipeline.attach_overrides("shop", True, bootstrap="k1:9092")
    with pytest.raises(KafkaproofError, match="leave out cluster_backend"):
        pipeline.attach_overrides("shop", True, backend="local")
    assert pipeline.attach_overrides("shop", True) == {"attach_project": "shop", "faults_hit_attached": True}


def test_a_pipeline_attaches_a_compose_project_only_with_the_acknowledgement(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text("name: s\nguarantee: at-least-once\nproducers: {messages: 10}\n"
                                     "faults: [{at: 1, kind: kill, target: 'leader:0', duration: 2}]\n")
    monkeypatch.setenv("KAFKAPROOF_SCENARIOS", str(tmp_path))
    (scn,) = pipeline.suite(names=["s"])
    plain = resolve(scn, Overrides())
    assert pipeline.attaches(plain) is None
    acknowledged = resolve(scn, Overrides(**pipeline.attach_overrides("shop", True)))
    assert pipeline.attaches(acknowledged) == "shop"
    assert Overrides.from_dict(acknowledged.overrides.to_dict()).faults_hit_attached is True  # it crosses XCom
    unacknowledged = resolve(scn, Overrides(attach_project="shop"))  # e.g. a scenario file's cluster.attach
    with pytest.raises(KafkaproofError, match="would hit your compose project shop: set the DAG param "
                                              "i_understand_faults_hit_this_cluster"):
        pipeline.provision(unacknowledged, "kp-never-started")
    assert "kp-never-started" not in state.list_clusters()
