"""The placement of a batch on worker hosts (`kafkaproof.hosts`, `batch.place`), the same-host check of a fault
task and the visibility check of the analysis: pure, no Airflow, no cluster."""
from __future__ import annotations

import pytest

from kafkaproof import batch, hosts, pipeline
from kafkaproof.errors import AnalysisError, FaultError
from kafkaproof.run.control import check_same_host, drive_fault
from kafkaproof.spec.scenario import Scenario, validate_document

pytestmark = pytest.mark.unit


def scn(name: str, brokers: int = 1) -> Scenario:
    doc = {"name": name, "guarantee": "at-least-once", "producers": {"messages": 10},
           "topic": {"replication_factor": 1}, "cluster": {"brokers": brokers}}
    return Scenario(name, f"{name}.yaml", validate_document(doc, name))


def test_one_host_by_default_is_todays_layout(monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_HOST", "box")
    one = hosts.layout()
    assert one.single and [h.name for h in one.hosts] == ["box"]
    assert one.host("box").task_args() == {"pool": "kafka_cluster"}  # Airflow's default queue
    assert one.host("box").queue_args() == {}
    assert one.pools() == [("kafka_cluster", 1, "one Kafka cluster per host")]  # as the setup always made it
    assert one.assign(["a", "b", "c"], [False, False, False]) == ["box"] * 3
    # one host named explicitly is the same layout
    assert hosts.layout("w1").host("w1").task_args() == {"pool": "kafka_cluster"}


def test_several_hosts_each_have_a_queue_and_a_pool_with_their_slots():
    two = hosts.layout("w1, w2", slots="w1=2")
    assert not two.single
    assert two.host("w1").task_args() == {"pool": "kafka_cluster_w1", "queue": "kafkaproof-w1"}
    assert two.host("w2").queue_args() == {"queue": "kafkaproof-w2"}
    assert two.pools() == [("kafka_cluster_w1", 2, "Kafka clusters on worker host w1 (queue kafkaproof-w1)"),
                           ("kafka_cluster_w2", 1, "Kafka clusters on worker host w2 (queue kafkaproof-w2)")]
    assert [h.slots for h in hosts.layout("a,b", slots="3").hosts] == [3, 3]


def test_groups_go_round_robin_over_the_hosts_that_are_up():
    three = hosts.layout("w1,w2,w3", down="w2")
    assert three.assign(list("abcde"), [False] * 5) == ["w1", "w3", "w1", "w3", "w1"]
    assert three.home.name == "w1" and hosts.layout("w1,w2", down="w1").home.name == "w2"
    with pytest.raises(hosts.HostPlanError, match="every host is down"):
        hosts.layout("w1,w2", down="w1,w2").assign(["a"], [False])


def test_groups_sharing_a_cluster_stay_on_one_host_and_pins_win():
    two = hosts.layout("w1,w2", pins="c=w1,d=w2")
    # a,b share a cluster; c is pinned to w1; d pinned to w2 although it shares with c (its own cluster then)
    assert two.assign(["a", "b", "c", "d", "e"], [True, False, True, False, False]) == ["w1", "w1", "w1", "w2", "w2"]
    # a host a long shared-cluster unit keeps busy gets the next groups only when the others caught up
    assert hosts.layout("w1,w2").assign(list("abcdefg"), [True, True, False, False, False, False, False]) == [
        "w1", "w1", "w1", "w2", "w2", "w2", "w1"]
    # an unpinned unit follows the pin of one of its members
    assert hosts.layout("w1,w2", pins="y=w2").assign(["x", "y"], [True, False]) == ["w2", "w2"]
    # a pin to a host that is down still holds (the tasks wait on its queue)
    assert hosts.layout("w1,w2", down="w2", pins="a=w2").assign(["a", "b"], [False, False]) == ["w2", "w1"]


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": "w1,w2", "pins": "a=w9"}, "KAFKAPROOF_HOST_PINS names w9, not in KAFKAPROOF_HOSTS"),
    ({"hosts": "w1,w2", "down": "w3"}, "KAFKAPROOF_HOSTS_DOWN names w3"),
    ({"hosts": "w1,w2", "slots": "w1=0"}, "not a slot count"),
    ({"hosts": "w1,w2", "slots": "w1"}, "not a slot count"),
    ({"hosts": "w1,w1"}, "names a host twice"),
    ({"hosts": "w 1"}, "is not a host name"),
    ({"hosts": "w1", "pins": "a"}, "is not NAME=VALUE"),
])
def test_bad_settings_say_which_setting(kwargs, message):
    with pytest.raises(hosts.HostPlanError, match=message):
        hosts.layout(**kwargs)


def test_settings_come_from_the_environment_first():
    env = {"KAFKAPROOF_HOSTS": "w1,w2", "KAFKAPROOF_HOST_SLOTS": "2"}
    layout = hosts.layout_from(hosts.settings_lookup(env))
    assert [(h.name, h.slots, h.up) for h in layout.hosts] == [("w1", 2, True), ("w2", 2, True)]
    assert hosts.layout_from({}.get, here="me").pools()[0][0] == "kafka_cluster"


def test_a_placed_plan_keeps_a_cluster_only_for_a_next_run_on_its_host():
    plan = batch.suite_plan([scn("a", 3), scn("b", 3), scn("c"), scn("d")])
    assert [r.keep_for_next for r in plan.runs] == [True, False, True, False]
    # c and d share a cluster but are pinned apart: c's teardown does not keep it
    placed = batch.place(plan, hosts.layout("w1,w2", pins="c=w1,d=w2"))
    assert [(r.name, r.host, r.keep_for_next) for r in placed.runs] == [
        ("a", "w1", True), ("b", "w1", False), ("c", "w1", False), ("d", "w2", False)]
    assert batch.lanes(placed) == {"w1": [0, 1, 2], "w2": [3]}
    together = batch.place(plan, hosts.layout("w1,w2"))
    assert [(r.host, r.keep_for_next) for r in together.runs] == [("w1", True), ("w1", False), ("w2", True),
                                                                  ("w2", False)]
    one = batch.place(plan, hosts.layout(here="box"))  # one host: the plan as it was
    assert [r.keep_for_next for r in one.runs] == [r.keep_for_next for r in plan.runs]
    assert batch.lanes(one) == {"box": [0, 1, 2, 3]}


def test_a_fault_task_on_another_host_than_its_run_fails_naming_both_hosts_and_the_queue(monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_HOST", "w2")
    check_same_host("af-x", 0, "w2", "kafkaproof-w2")  # same host: fine
    check_same_host("af-x", 0, None, None)  # an older provision that did not say: as before
    with pytest.raises(FaultError, match="runs on host w2, its run on host w1.*queue kafkaproof-w1"):
        drive_fault("af-x", 0, 1, log=lambda m: None, run_host="w1", queue="kafkaproof-w1")


def test_a_run_directory_the_analysis_cannot_see_is_an_error_naming_path_and_host(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_HOST", "spark-host")
    seen = tmp_path / "run-1"
    seen.mkdir()
    pipeline.check_runs_visible([{"run_dir": str(seen), "status": "complete", "host": "w1"},
                                 {"run_dir": None, "status": "error"}, None])
    with pytest.raises(AnalysisError, match=rf"not visible on host spark-host.*{tmp_path}/run-2 \(written on host w2\)"):
        pipeline.check_runs_visible([{"run_dir": str(seen), "status": "complete", "host": "w1"},
                                     {"run_dir": str(tmp_path / "run-2"), "status": "complete", "host": "w2"}])


def test_the_cli_prints_the_pools_the_setup_creates(capsys, monkeypatch):
    from kafkaproof import cli
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    monkeypatch.setenv("KAFKAPROOF_HOSTS", "w1,w2")
    monkeypatch.setenv("KAFKAPROOF_HOST_SLOTS", "w2=2")
    assert cli.main(["hosts", "--pools"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "kafka_cluster_w1\t1\tKafka clusters on worker host w1 (queue kafkaproof-w1)",
        "kafka_cluster_w2\t2\tKafka clusters on worker host w2 (queue kafkaproof-w2)"]
    monkeypatch.setenv("KAFKAPROOF_HOSTS", "w1,w9")
    monkeypatch.setenv("KAFKAPROOF_HOST_SLOTS", "w2=2")
    assert cli.main(["hosts"]) == 2  # the error names the setting
    assert "KAFKAPROOF_HOST_SLOTS names w2" in capsys.readouterr().err


def test_without_cluster_reuse_runs_that_could_share_a_cluster_are_spread_one_by_one():
    plan = batch.suite_plan([scn("a"), scn("b")])  # equal clusters: the plan says a may keep its for b
    assert [r.keep_for_next for r in plan.runs] == [True, False]
    assert [r.host for r in batch.place(plan, hosts.layout("w1,w2")).runs] == ["w1", "w1"]
    spread = batch.place(plan, hosts.layout("w1,w2"), shared_clusters=False)
    assert [(r.host, r.keep_for_next) for r in spread.runs] == [("w1", False), ("w2", False)]
    assert batch.lanes(spread) == {"w1": [0], "w2": [1]}
    # one host: the plan as it was (the DAG run's reuse_clusters param still decides)
    one = batch.place(plan, hosts.layout(here="box"), shared_clusters=False)
    assert [r.keep_for_next for r in one.runs] == [True, False]
