"""Dynamic KRaft quorums (issue 44.3): the layout and format arguments, the refusals, the tool's output, the spare
picked, and the analysis' judges of a quorum fault and of the `quorum` condition."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaproof.cluster.local import dynamic_quorum_format_args
from kafkaproof.cluster.quorum import parse_status
from kafkaproof.errors import ClusterError, FaultError, ScenarioError
from kafkaproof.faults.families import HANDLERS
from kafkaproof.faults.families.quorum import pick_spare
from kafkaproof.spec import quorum, scenario as scenario_mod
from kafkaproof.spec.cluster import ClusterConfig, cluster_config, node_properties, plan_nodes
from kafkaproof.spec.faults import FaultSpec

from support import load_analysis_job

pytestmark = pytest.mark.unit

BASE = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}
DYNAMIC = {"controllers": 3, "quorum": "dynamic", "spare_controllers": 1}
REPLACE = [{"at": 1, "kind": "replace_controller", "target": "node:101"}]

STATUS_43 = """[2026-11-28T21:56:35,058] INFO Kafka version: 4.3.1 (org.apache.kafka.common.utils.AppInfoParser)
	ssl.truststore.type = JKS
ClusterId:              r-mfKAwWTHC0v2P1uXw8LQ
LeaderId:               101
LeaderEpoch:            1
HighWatermark:          31
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   0
CurrentVoters:          [{"id": 101, "directoryId": "6Fk7KJk6RIKoVIlyhMKs9A", "endpoints": ["CONTROLLER://10.77.1.6:9093"]}, {"id": 102, "directoryId": "6D-lp0PgQouTKNPeIad0dg", "endpoints": ["CONTROLLER://10.77.1.10:9093"]}, {"id": 103, "directoryId": "yG5NovavSy-Oer2kb-nDMg", "endpoints": ["CONTROLLER://10.77.1.14:9093"]}]
CurrentObservers:       [{"id": 104, "directoryId": "6WejTn-h9Yd5rVyGFaQH_A"}, {"id": 1, "directoryId": "tFeZcW-i_q0mUxyKb6fvjA"}]
"""


def test_a_dynamic_quorum_is_formatted_with_its_initial_controllers_and_spares_as_observers():
    config = ClusterConfig(brokers=3, controllers=3, quorum="dynamic", spare_controllers=1)
    assert config.node_ids() == [1, 2, 3, 101, 102, 103, 104] and config.roles(104) == "controller"
    assert config.controller_ids() == [101, 102, 103] and config.spare_ids() == [104]
    nodes = plan_nodes(config, 1, use_netns=False)
    props = node_properties(config, nodes[-1], nodes, Path("/n"), 4)
    assert "controller.quorum.voters" not in props
    assert props["controller.quorum.bootstrap.servers"].count(":") == 3
    args = dynamic_quorum_format_args(config, nodes)
    assert args[1] == [] and args[104] == ["--no-initial-controllers"]
    flag, value = args[101]
    assert flag == "--initial-controllers" and value == args[103][1]  # the same list on every voter
    assert [v.split("@")[0] for v in value.split(",")] == ["101", "102", "103"]
    assert all(len(v.split(":")[-1]) == 22 for v in value.split(","))  # a directory id each
    combined = ClusterConfig(brokers=1, quorum="dynamic")
    assert dynamic_quorum_format_args(combined, plan_nodes(combined, 1, False)) == {1: ["--standalone"]}
    assert dynamic_quorum_format_args(ClusterConfig(), plan_nodes(ClusterConfig(), 1, False)) == {}
    static = node_properties(ClusterConfig(), *[plan_nodes(ClusterConfig(), 1, False)[0]],
                             plan_nodes(ClusterConfig(), 1, False), Path("/n"), 4)
    assert "controller.quorum.voters" in static


def test_the_quorum_settings_reach_the_cluster_and_its_state_layout():
    data = scenario_mod.validate_document({**BASE, "cluster": DYNAMIC, "faults": REPLACE}, "s.yaml")
    config = cluster_config(data, "t")
    assert (config.quorum, config.spare_controllers) == ("dynamic", 1)
    again = ClusterConfig.from_layout("t", config.node_layout(), "4.3.1")
    assert (again.quorum, again.spare_controllers) == ("dynamic", 1)
    assert "quorum" not in ClusterConfig().node_layout()  # older clusters' states (and reuse keys) stay as they were
    assert spare_target_ok()


def spare_target_ok() -> bool:
    """A spare is a node a fault may name."""
    scenario_mod.validate_document({**BASE, "cluster": DYNAMIC,
                                    "faults": [{"at": 1, "kind": "kill", "target": "node:104", "duration": 1}]}, "s")
    return True


@pytest.mark.parametrize("doc,field,words", [
    ({"faults": REPLACE, "cluster": {"controllers": 3}}, "cluster.quorum", "static, but faults[0] (replace_controller)"),
    ({"cluster": {"spare_controllers": 1}}, "cluster.spare_controllers", "set cluster.quorum: dynamic"),
    ({"cluster": {**DYNAMIC, "kafka_version": "3.8.1"}}, "cluster.quorum", "Kafka 3.8.1 has no dynamic KRaft quorum"),
    ({"cluster": {"quorum": "dynamic", "brokers": 3, "backend": "compose"}}, "cluster.quorum", "only the local backend"),
    ({"cluster": {**DYNAMIC, "spare_controllers": 0}, "faults": REPLACE}, "cluster.spare_controllers",
     "adds 1 controller"),
    ({"cluster": DYNAMIC, "faults": [{"at": 1, "kind": "add_controller", "params": {"node": 103}}]},
     "faults[0].params.node", "103 is not a spare controller"),
    ({"cluster": DYNAMIC, "faults": [{**REPLACE[0], "duration": 3}]}, "faults[0].duration", "takes no duration"),
    ({"cluster": DYNAMIC, "faults": [{"at": 1, "kind": "add_controller", "target": "node:104"}]},
     "faults[0].target", "takes no target"),
    ({"cluster": DYNAMIC, "exercised": [{"check": "quorum", "voter_count": 3}]}, "exercised[0].check",
     "the timeline has none"),
    ({"cluster": DYNAMIC, "faults": REPLACE, "exercised": [{"check": "quorum"}]}, "exercised[0].check",
     "needs one of voters"),
    ({"cluster": DYNAMIC, "faults": REPLACE, "exercised": [{"check": "quorum", "partition": 0}]},
     "exercised[0].partition", "not a parameter of quorum"),
])
def test_what_cannot_change_a_quorum_is_refused_naming_the_field(doc, field, words):
    with pytest.raises(ScenarioError) as e:
        scenario_mod.validate_document({**BASE, **doc}, "s.yaml")
    assert f"s.yaml: {field}:" in str(e.value) and words in str(e.value), str(e.value)


def test_the_cluster_config_refuses_a_dynamic_quorum_where_it_cannot_run():
    with pytest.raises(ClusterError, match="3.8.1 has no dynamic"):
        ClusterConfig(quorum="dynamic", kafka_version="3.8.1").validate()
    with pytest.raises(ClusterError, match="spare controllers join a dynamic quorum"):
        ClusterConfig(spare_controllers=1).validate()
    ClusterConfig(controllers=3, quorum="dynamic", spare_controllers=2, kafka_version="3.9.2").validate()


def test_the_catalog_quorum_scenarios_load():
    for name in ("kafka4-quorum-replace-controller-leader-kill", "kafka4-quorum-add-remove-leader"):
        s = scenario_mod.load(Path(__file__).parents[3] / "scenarios" / f"{name}.yaml")
        assert s.data["cluster"]["quorum"] == "dynamic" and "kafka4" in s.data["tags"]


def test_the_tools_status_is_read_with_directory_ids_and_observers():
    status = parse_status(STATUS_43)
    assert (status.leader, status.epoch, status.voters, status.observers) == (101, 1, [101, 102, 103], [1, 104])
    assert status.directories[102] == "6D-lp0PgQouTKNPeIad0dg"
    old = parse_status("LeaderId: -1\nLeaderEpoch: 4\nCurrentVoters: [1,2,3]\nCurrentObservers: []\n")
    assert old.leader is None and old.voters == [1, 2, 3] and old.directories == {}
    with pytest.raises(ClusterError, match="no quorum status"):
        parse_status("Error: timed out")


def test_the_spare_added_is_named_or_the_first_free_observer():
    assert pick_spare([104, 105], [101, 102, 103], [105], None) == 105
    assert pick_spare([104, 105], [101, 102, 104], [], None) == 105
    assert pick_spare([104, 105], [101, 102, 103], [], 104) == 104
    with pytest.raises(FaultError, match="no spare controller left"):
        pick_spare([104], [101, 104], [], None)
    with pytest.raises(FaultError, match="not a spare"):
        pick_spare([104], [101], [], 103)


def test_the_quorum_family_is_registered_and_refused_on_a_static_quorum():
    assert FaultSpec("remove_controller").resolved_target == "controller"
    assert FaultSpec("add_controller").resolved_target == ""
    FaultSpec("add_controller", params={"node": 104}).validate()
    with pytest.raises(FaultError, match="timeout_s"):
        FaultSpec("replace_controller", params={"timeout_s": 0}).validate()

    class Static:
        name, backend = "c", "local"

        def state(self):
            return type("S", (), {"config": {"brokers": 3, "controllers": 0}})()
    with pytest.raises(FaultError, match="static one"):
        HANDLERS["quorum"].require(Static(), FaultSpec("add_controller"))


def fault_row(kind: str, start: int, **record) -> dict:
    return {"kind": kind, "target": "" if kind == "add_controller" else "controller", "start_ns": start,
            "fault_id": f"{kind}-{start}", "effect": json.dumps({"quorum": record})}


REPLACED = dict(voters_before=[101, 102, 103], voters_after=[102, 103, 104], removed=101, added=104, remove_s=1.5,
                add_s=1.5, leader_before=101, leader_after=103, epoch_before=1, epoch_after=2, elections=1)


def test_a_quorum_fault_took_effect_only_when_the_voters_changed_as_it_says():
    job = load_analysis_job()
    held, evidence = job.fault_effect(fault_row("replace_controller", 1, **REPLACED))
    assert held and "[101, 102, 103] → [102, 103, 104]" in evidence and "1 election" in evidence
    held, _ = job.fault_effect(fault_row("replace_controller", 1, **{**REPLACED, "voters_after": [101, 102, 103]}))
    assert not held
    held, evidence = job.fault_effect({"kind": "add_controller", "target": "", "effect": "{}"})
    assert not held and "no quorum change" in evidence


def test_the_quorum_condition_reads_the_last_change_and_counts_the_elections():
    job = load_analysis_job()
    added = dict(voters_before=[101, 102, 103], voters_after=[101, 102, 103, 104], added=104, epoch_before=1,
                 epoch_after=1, elections=0, leader_after=101)
    removed = dict(voters_before=[101, 102, 103, 104], voters_after=[102, 103, 104], removed=101, epoch_before=1,
                   epoch_after=2, elections=1, leader_after=102)
    faults = [fault_row("remove_controller", 20, **removed), fault_row("add_controller", 10, **added)]

    def judge(**cond):
        result = job.exercise_results(faults, [{"check": "quorum", **cond}], [], {}, {}, 0, {}, t0=0)[-1]
        assert result["check"] == "quorum"
        return result["held"], result["evidence"]
    assert judge(voters=[104, 103, 102])[0] and judge(voter_count=3, min_elections=1)[0]
    held, evidence = judge(min_elections=2)
    assert not held and "1 election during 2 quorum changes (need 2)" in evidence
    assert not judge(voter_count=4)[0]
    (none,) = job.exercise_results([], [{"check": "quorum", "voter_count": 3}], [], {}, {}, 0, {}, t0=0)
    assert not none["held"] and "no quorum fault" in none["evidence"]
    assert quorum.spare_ids(3, 2) == [104, 105] and quorum.spare_ids(0, 1) == [101]


def test_a_replacement_removes_the_leader_then_adds_the_free_spare_and_records_both(monkeypatch):
    from kafkaproof.cluster import quorum as cq
    from kafkaproof.cluster.quorum import QuorumStatus
    voters, observers, epoch, calls = [101, 102, 103], [1, 104], [1], []

    def describe(cluster):
        leader = voters[0] if 101 in voters else 102
        return QuorumStatus(leader, epoch[0], sorted(voters), {v: f"dir{v}" for v in voters}, sorted(observers))

    def remove(cluster, node, directory):
        calls.append(("remove", node, directory))
        voters.remove(node), observers.append(node)
        epoch[0] += 1

    def add(cluster, node):
        calls.append(("add", node))
        voters.append(node), observers.remove(node)

    monkeypatch.setattr(cq, "describe", describe)
    monkeypatch.setattr(cq, "remove_controller", remove)
    monkeypatch.setattr(cq, "add_controller", add)
    monkeypatch.setattr(cq, "spare_ids", lambda cluster: [104])
    monkeypatch.setattr(cq, "mark_changed", lambda cluster: calls.append(("changed",)))
    cluster = type("C", (), {"node_state": lambda self, n: "running"})()
    injector = type("I", (), {"cluster": cluster})()
    done = HANDLERS["quorum"].inject(injector, FaultSpec("replace_controller"), [102], "f")
    assert calls == [("remove", 101, "dir101"), ("add", 104), ("changed",)]  # the leader, not the stale target
    record = done.effect["quorum"]
    assert (record["voters_before"], record["voters_after"], record["elections"]) == ([101, 102, 103], [102, 103, 104], 1)
    assert done.nodes == [101, 104] and done.over and done.heal == {}
