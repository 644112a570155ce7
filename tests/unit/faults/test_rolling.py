"""Rolling faults without a cluster: their order, parameters, scenario checks, compose file and verdict."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from support import REPO, load_analysis_job

from kafkaproof.cluster.compose import rolled_yaml
from kafkaproof.errors import FaultError, ScenarioError
from kafkaproof.faults.families.rolling import feature_levels, release_of, roll_order
from kafkaproof.report.shaping import node_segments
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.faults import FaultSpec

job = load_analysis_job()
pytestmark = pytest.mark.unit

COMBINED = {n: ["broker", "controller"] for n in (1, 2, 3)}


def test_roll_order_puts_dedicated_controllers_first_and_the_active_controller_last():
    assert roll_order([1, 2, 3], COMBINED, active_controller=1) == [2, 3, 1]
    assert roll_order([3, 1, 2], COMBINED, active_controller=None) == [1, 2, 3]
    roles = {1: ["broker"], 2: ["broker"], 101: ["controller"], 102: ["controller"]}
    assert roll_order([1, 2, 101, 102], roles, active_controller=101) == [102, 101, 1, 2]


def test_feature_levels_leave_kraft_version_alone():
    out = "metadata.version=30 (4.3)\nkraft.version=1\ntransaction.version=2\ngroup.version=1\n\n"
    assert feature_levels(out) == {"metadata.version": 30, "transaction.version": 2, "group.version": 1}
    assert release_of("4.3.1") == "4.3"


@pytest.mark.parametrize("params, message", [
    ({}, "params.version: required"),
    ({"version": "5.x"}, "params.version"),
    ({"version": "4.3.1", "config": {"Bad Name": 1}}, "not a Kafka setting name"),
    ({"version": "4.3.1", "config": {"num.replica.fetchers": [2]}}, "params.config.num.replica.fetchers"),
    ({"version": "4.3.1", "timeout_s": 0}, "params.timeout_s"),
])
def test_rolling_upgrade_parameters_are_checked(params, message):
    with pytest.raises(FaultError, match=message.replace(".", r"\.")):
        FaultSpec("rolling_upgrade", "", params).validate()


def test_a_rolling_restart_may_change_settings_or_nothing_and_defaults_to_every_node():
    plain = FaultSpec("rolling_restart", "", {}).validate()  # every node restarted in turn, as it was
    assert plain.resolved_target == "all" and plain.is_rolling
    spec = FaultSpec("rolling_restart", "", {"config": {"num.replica.fetchers": 2}}).validate()
    assert spec.resolved_target == "all" and spec.is_rolling


def _upgrade_doc(**fault) -> dict:
    return {"name": "u", "guarantee": "at-least-once", "producers": {"messages": 10},
            "cluster": {"kafka_version": "3.9.2"},
            "faults": [{"at": 1, "kind": "rolling_upgrade", "params": {"version": "4.3.1"}, **fault}]}


@pytest.mark.parametrize("fault, message", [
    ({"duration": 5}, "faults[0].duration: a rolling fault takes no duration"),
    ({"target": "leader:0"}, "faults[0].target: 'leader:0': a rolling fault rolls nodes named up front"),
    ({"params": {"version": "3.9.2"}}, "faults[0].params.version: 3.9.2 is what the cluster starts on"),
])
def test_scenario_checks_of_rolling_faults(fault, message):
    with pytest.raises(ScenarioError, match=message.replace(".", r"\.").replace("[", r"\[").replace("(", r"\(")):
        scenario_mod.validate_document(_upgrade_doc(**fault), "s.yaml")


def test_upgrade_to_overrides_every_rolling_upgrade_and_is_checked_again():
    scn = scenario_mod.Scenario("u", "s.yaml", scenario_mod.validate_document(_upgrade_doc(), "s.yaml"))
    assert scn.upgrade_versions == ["4.3.1"]
    moved = scn.with_overrides(kafka_version="3.8.1", upgrade_to="3.9.2")
    assert moved.upgrade_versions == ["3.9.2"] and moved.data["cluster"]["kafka_version"] == "3.8.1"
    with pytest.raises(ScenarioError, match="3.9.2 is what the cluster starts on"):
        scn.with_overrides(upgrade_to="3.9.2")
    plain = scenario_mod.Scenario("b", "b.yaml", scenario_mod.validate_document(
        {"name": "b", "guarantee": "at-least-once", "producers": {"messages": 10}}, "b.yaml"))
    with pytest.raises(ScenarioError, match="has no rolling_upgrade"):
        plain.with_overrides(upgrade_to="4.3.1")


def test_catalog_upgrade_scenarios_roll_from_production_to_the_default_version():
    catalog = {s.name: s for s in scenario_mod.load_catalog(REPO / "scenarios")}
    ups = [s for s in catalog.values() if "upgrade" in s.data["tags"]]
    assert {"upgrade-39-to-43-idempotent", "upgrade-39-to-43-dedicated-controller", "upgrade-39-to-43-acks-1"} <= {
        s.name for s in ups}
    for s in ups:
        assert s.data["cluster"]["kafka_version"] == "3.9.2" and s.upgrade_versions == ["4.3.1"]


def test_rolled_yaml_gives_rolled_nodes_their_image_and_settings():
    nodes = [{"id": 1, "service": "kafka1", "image": "kafkaproof/kafka:4.3.1", "settings": {"num.replica.fetchers": 2}},
             {"id": 2, "service": "kafka2"}]
    assert yaml.safe_load(rolled_yaml(nodes)) == {"services": {"kafka1": {
        "image": "kafkaproof/kafka:4.3.1", "environment": {"KAFKA_NUM_REPLICA_FETCHERS": "2"}}}}


def _fault(kind, params, effect):
    return {"fault_id": f"{kind}-1", "kind": kind, "target": "all", "params": json.dumps(params),
            "effect": json.dumps(effect)}


def test_a_rolling_upgrade_took_effect_only_when_every_node_came_back_on_the_version_and_it_was_finalised():
    step = {"version_before": "3.9.2", "version_after": "4.3.1", "settings": {}, "caught_up_s": 3.1}
    done = {"rolled": {"1": step, "2": step}, "versions_after": {"1": "4.3.1", "2": "4.3.1"},
            "finalized": {"finalized": True, "release": "4.3"}}
    assert job.fault_effect(_fault("rolling_upgrade", {"version": "4.3.1"}, done)) == (
        True, "2 nodes rolled to Kafka 4.3.1; features finalised")
    half = {**done, "versions_after": {"1": "4.3.1", "2": "3.9.2"}}
    assert job.fault_effect(_fault("rolling_upgrade", {"version": "4.3.1"}, half))[0] is False
    unfinalised = {k: v for k, v in done.items() if k != "finalized"}
    assert job.fault_effect(_fault("rolling_upgrade", {"version": "4.3.1"}, unfinalised)) == (
        False, "2 nodes rolled to Kafka 4.3.1; features NOT finalised")
    assert job.fault_effect(_fault("rolling_upgrade", {"version": "4.3.1", "finalize": False}, unfinalised))[0]
    assert job.fault_effect(_fault("rolling_restart", {"config": {"a.b": 1}}, {}))[0] is False


def test_the_steps_of_a_roll_are_judged_each():
    step = {"version_before": "3.9.2", "version_after": "4.3.1", "settings": {}, "caught_up_s": 2.5}
    assert job.fault_effect(_fault("roll_node", {}, {"step": step})) == (
        True, "3.9.2 → 4.3.1, serving again 2.5s after its start")
    assert job.fault_effect(_fault("roll_node", {}, {"effect_error": "node 2 stopped itself"})) == (
        False, "the node did not come back: node 2 stopped itself")
    plain = {"version_before": None, "version_after": None, "settings": {}, "caught_up_s": 4.0,
             "started_before": "811:2026-11-28T15:01:02Z", "started_after": "990:2026-11-28T15:01:20Z"}
    assert job.fault_effect(_fault("roll_node", {}, {"step": plain})) == (
        True, "restarted: started 811:2026-11-28T15:01:02Z → 990:2026-11-28T15:01:20Z, serving again 4.0s after its start")
    same = {**plain, "started_after": plain["started_before"]}  # never restarted: not exercised
    assert job.fault_effect(_fault("roll_node", {}, {"step": same}))[0] is False
    assert job.fault_effect(_fault("rolling_restart", {}, {"rolled": {"1": plain}}))[0] is True
    assert job.fault_effect(_fault("rolling_restart", {}, {"rolled": {"1": plain, "2": same}})) == (
        False, "2 nodes rolled; nodes 2 did not restart and serve again")
    assert job.fault_effect(_fault("finalize_features", {}, {"step": {"finalized": True, "release": "4.3"}}))[0]
    assert not job.fault_effect(_fault("finalize_features", {}, {"effect_error": "refused"}))[0]


def test_node_lanes_show_each_nodes_version():
    snaps = pd.DataFrame({"ts_ns": [0, 10**9, 2 * 10**9], "live_nodes": [[1, 2], [2], [1, 2]],
                          "node_versions": ['{"1": "3.9.2", "2": "3.9.2"}', '{"1": "4.3.1", "2": "3.9.2"}',
                                            '{"1": "4.3.1", "2": "3.9.2"}']})
    lanes = node_segments(snaps, 0, [1, 2])
    assert [(s.label, s.state) for s in lanes[1]] == [("3.9.2", "up"), ("down", "down"), ("4.3.1", "up")]
    assert [(s.label, s.start_s, s.end_s) for s in lanes[2]] == [("3.9.2", 0.0, 3.0)]
    old = node_segments(snaps.drop(columns="node_versions"), 0, [1, 2])
    assert [s.label for s in old[1]] == ["live", "down", "live"]


def test_the_upgrade_page_leads_with_the_roll_and_a_failed_roll_makes_the_upgrade_unsafe(tmp_path):
    from kafkaproof.report.upgrade_page import render_upgrade, rolling_facts
    from kafkaproof.verdict.summary import upgrade_differences
    s = 10**9
    step = {"version_before": "3.9.2", "version_after": "4.3.1", "settings": {}, "caught_up_s": 3.0, "out_s": 5.0}
    faults = pd.DataFrame([
        {"kind": "rolling_upgrade", "nodes": [1, 2], "params": '{"version": "4.3.1"}', "start_ns": 10 * s,
         "heal_ns": 30 * s, "effect": "{}"},
        {"kind": "roll_node", "nodes": [2], "params": '{"from": "3.9.2", "to": "4.3.1"}', "start_ns": 10 * s,
         "heal_ns": 17 * s, "effect": json.dumps({"step": step})},
        {"kind": "finalize_features", "nodes": [1, 2], "params": "{}", "start_ns": 28 * s, "heal_ns": 30 * s,
         "effect": json.dumps({"step": {"finalized": True, "release": "4.3", "levels": {"metadata.version": 30}}})}])
    sends = pd.DataFrame({"intended_ns": [5 * s, 12 * s, 20 * s], "complete_ns": [5 * s + 1, 13 * s + 5 * 10**8, 20 * s + 7],
                          "outcome": ["ok", "ok", "ok"]})
    facts = rolling_facts(faults, sends)
    assert facts["roll_s"] == 20.0 and facts["max_ack_ms"] == 1500.0 and facts["acked_during"] == 2
    assert facts["nodes"] == [{"node": 2, "from": "3.9.2", "to": "4.3.1", "out_s": 5.0, "caught_up_s": 3.0, "error": None}]
    assert facts["finalized"]["release"] == "4.3"
    failed = {"scenario": "upgrade-x", "label": "rolling", "verdict": "fail", "kafka_version": "3.9.2",
              "violations": ["lost: 12 acknowledged values"], "metrics": {}}
    assert upgrade_differences([failed]) == [
        "upgrade-x: the rolling upgrade from 3.9.2 did not pass (fail): lost: 12 acknowledged values"]
    html = render_upgrade([failed], upgrade_differences([failed]), "b", tmp_path)
    assert "THE ROLLING UPGRADE DID NOT PASS" in html and "The rolling upgrade, under load" in html
