"""The fault families' registry and handlers without a cluster: one handler per family, recipes the cluster
layer can undo (also those of state files an older kafkaproof wrote), and evidence that is the family's."""
from __future__ import annotations

import random
import signal
from types import SimpleNamespace

import pytest

from kafkaproof.cluster import heal
from kafkaproof.errors import FaultError
from kafkaproof.faults.families import HANDLERS, AppHandler, ConsumerHandler, handler_for
from kafkaproof.spec import fault_families
from kafkaproof.spec.cluster import NodeLink
from kafkaproof.spec.faults import FAULT_KINDS, FaultSpec

pytestmark = pytest.mark.unit

FAMILIES = fault_families.FAMILIES


def test_every_node_family_has_one_handler_and_the_consumer_and_app_families_their_own():
    assert set(HANDLERS) == {f.name for f in fault_families.NODE_FAMILIES}
    assert all(h.family is FAMILIES[name] for name, h in HANDLERS.items())
    assert ConsumerHandler.family is FAMILIES["consumer"] and AppHandler.family is FAMILIES["app"]
    assert set(FAULT_KINDS) == {k for f in fault_families.NODE_FAMILIES for k in f.kinds}
    for kind in FAULT_KINDS:
        assert kind in handler_for(kind).family.kinds
    assert handler_for("roll_node") is handler_for("finalize_features") is HANDLERS["rolling"]
    with pytest.raises(FaultError, match="unknown fault kind 'nope'"):
        handler_for("nope")


def test_a_family_is_found_by_kind_and_target():
    assert fault_families.family_of("kill").name == "process"
    assert fault_families.family_of("kill", "consumer:0").name == "consumer"
    with pytest.raises(FaultError, match="cannot target consumers"):
        fault_families.family_of("isolate", "consumer:0")
    assert fault_families.family_of("restart", "app:signup-service").name == "app"
    assert fault_families.family_of("pause", "app:signup-service:1").name == "app"
    with pytest.raises(FaultError, match="'isolate' cannot target apps; allowed: kill, stop, pause, restart"):
        fault_families.family_of("isolate", "app:signup-service")


@pytest.mark.parametrize("spec", [
    FaultSpec("kill", "app:signup-service"), FaultSpec("stop", "app:web:0", {"timeout_s": 5}),
    FaultSpec("pause", "app:web2:7"), FaultSpec("restart", "app:a"), FaultSpec("kill", "consumer:0"),
], ids=lambda s: f"{s.kind}-{s.target}")
def test_targets_of_the_app_and_consumer_families_are_checked_for_their_form(spec):
    assert spec.validate() is spec


@pytest.mark.parametrize("spec, error", [
    (FaultSpec("kill", "app:"), r"fault.target: 'app:' is not a target of app faults; allowed forms: app:<service>, "
                                r"app:<service>:<instance>"),
    (FaultSpec("kill", "app:Signup"), "'app:Signup' is not a target of app faults"),
    (FaultSpec("kill", "app:-web"), "'app:-web' is not a target of app faults"),
    (FaultSpec("kill", "app:web:x"), "'app:web:x' is not a target of app faults"),
    (FaultSpec("kill", "app:web:1:2"), "'app:web:1:2' is not a target of app faults"),
    (FaultSpec("kill", "consumer:x"), "'consumer:x' is not a target of consumer faults; allowed forms: consumer:<index>"),
    (FaultSpec("isolate", "app:web"), "fault.kind: 'isolate' cannot target apps"),
    (FaultSpec("restart", "app:web", {"graceful": True}), "fault.params.graceful: not a parameter of restart; "
                                                          "allowed: none"),
    (FaultSpec("stop", "app:web", {"timeout_s": 0}), r"fault.params.timeout_s: must be > 0"),
    (FaultSpec("stop", "app:web", {"timeout_s": "5"}), r"fault.params.timeout_s: expected int or float"),
], ids=lambda x: x.target if isinstance(x, FaultSpec) else "")
def test_app_targets_of_another_form_and_other_kinds_are_refused(spec, error):
    with pytest.raises(FaultError, match=error):
        spec.validate()


def test_an_app_target_names_a_service_and_maybe_an_instance():
    assert fault_families.app_target("app:signup-service") == ("signup-service", None)
    assert fault_families.app_target("app:signup-service:2") == ("signup-service", 2)
    with pytest.raises(FaultError, match="'app:Web' is not an application target"):
        fault_families.app_target("app:Web")


def test_families_name_only_undo_steps_the_cluster_layer_has_and_consumers_signals():
    for family in FAMILIES.values():
        assert set(family.undo) <= set(heal.UNDO_STEPS), family.name
        assert set(family.actions) <= set(family.kinds) and set(family.colors) <= set(family.kinds)
        assert set(family.targetless) <= set(family.kinds)
    for name in ("consumer", "app"):  # their actions are the signals they send
        assert all(isinstance(getattr(signal, s), signal.Signals) for s in FAMILIES[name].actions.values())
        assert set(FAMILIES[name].actions) == set(FAMILIES[name].kinds)


class RecipeCluster:
    """What undoing a recipe asks of a cluster, recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    def resume_node(self, nid):
        self.calls.append(("resume", nid))

    def start_node(self, nid):
        self.calls.append(("start", nid))

    def wait_node_listening(self, nid, timeout_s):
        self.calls.append(("listening", nid))

    def set_clock_offsets(self, offsets):
        self.calls.append(("clock", offsets))
        return {n: {"offset_s": o, "faketime_loaded": True} for n, o in offsets.items()}

    def disk_state(self, nid):
        return "running"

    def disk_control(self, nid):
        calls = self.calls

        class Control:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def add_rule(self, rule):
                calls.append(("disk_rule", nid, rule["id"]))

            def remove_rule(self, rule_id):
                calls.append(("disk_unrule", nid, rule_id))
                return {"fired": 3}
        return Control()


def test_recipes_of_the_old_format_are_undone_in_order_and_unknown_steps_refused(monkeypatch):
    cluster = RecipeCluster()
    tc_cleared = []
    monkeypatch.setattr(heal.network, "nft_dropped", lambda ns, table: {"packets": 5, "bytes": 500})
    monkeypatch.setattr(heal.network, "nft_delete_table", lambda ns, table: cluster.calls.append(("nft", ns, table)))
    monkeypatch.setattr(heal.network, "tc_stats", lambda link: {"overlimits": 2, "dropped": 1})
    monkeypatch.setattr(heal.network, "tc_clear", lambda link: tc_cleared.append(link))
    link = NodeLink("kp1n1", "kp1n1h", "10.0.1.1", "10.0.1.2").to_json()
    # as a state file of the code before the families holds them
    recipe = {"nft": [["kp1n1", "kp_isolate_0123abcd"]], "tc": [link], "clock": [2], "resume": [3],
              "disk_rules": [[1, "disk_full-0123abcd"]], "restart": [1]}
    stats = heal.undo(cluster, recipe, restart_nodes=True)
    assert stats == {"disk_fired": 3, "dropped_packets": 5, "dropped_bytes": 500, "tbf_overlimits": 2, "tbf_dropped": 1}
    assert cluster.calls == [("disk_unrule", 1, "disk_full-0123abcd"), ("nft", "kp1n1", "kp_isolate_0123abcd"),
                             ("clock", {2: 0.0}), ("resume", 3), ("start", 1), ("listening", 1)]
    assert tc_cleared == [NodeLink.from_json(link)]
    cluster.calls.clear()
    assert heal.undo(cluster, {"restart": [1]}, restart_nodes=False) is None and cluster.calls == []
    assert heal.undo(cluster, {}, restart_nodes=True) is None
    with pytest.raises(FaultError, match="cannot undo: corrupt_files"):
        heal.undo(cluster, {"corrupt_files": [1]}, restart_nodes=True)
    # each family's heal evidence is what its undo steps report
    for family in FAMILIES.values():
        reported = {"disk_rules": {"disk_fired"}, "nft": {"dropped_packets", "dropped_bytes"},
                    "tc": {"tbf_overlimits", "tbf_dropped"}, "proxy_rules": {"proxy_fired", "proxy_matched"}}
        assert {k for step in family.undo for k in reported.get(step, ())} <= set(family.heal_fields), family.name


class NodeCluster(RecipeCluster):
    """A cluster whose nodes do what they are told, for the handlers' injections."""

    def __init__(self):
        super().__init__()
        self.states = {1: "running", 2: "running", 3: "running"}
        self.incarnations = {1: 0, 2: 0, 3: 0}

    def stop_node(self, nid, graceful=True, timeout_s=30.0):
        self.states[nid] = "dead"

    def start_node(self, nid):
        self.states[nid] = "running"
        self.incarnations[nid] += 1

    def pause_node(self, nid):
        self.states[nid] = "paused"

    def resume_node(self, nid):
        self.states[nid] = "running"

    def node_state(self, nid):
        return self.states[nid]

    def node_incarnation(self, nid):
        return self.incarnations[nid]

    def power_loss(self, nodes):
        for n in nodes:
            self.states[n] = "dead"
        return {n: {"node_state": "dead", "bytes_dropped": 10, "files": 1} for n in nodes}


@pytest.mark.parametrize("spec", [
    FaultSpec("kill", "node:1"), FaultSpec("stop", "node:1"), FaultSpec("pause", "node:1"),
    FaultSpec("restart", "node:1"), FaultSpec("clock_skew", "node:1", {"offset_s": 60}),
    FaultSpec("disk_full", "node:1"), FaultSpec("disk_latency", "node:1", {"ms": 5}), FaultSpec("power_loss", "node:1"),
], ids=lambda s: s.kind)
def test_a_handlers_injection_records_its_familys_evidence_and_undo_steps(spec):
    cluster = NodeCluster()
    injector = SimpleNamespace(cluster=cluster, rng=random.Random(1), resolve=lambda target: [1])
    handler = handler_for(spec.kind)
    nodes = handler.nodes(injector, spec)
    done = handler.inject(injector, spec, nodes, f"{spec.kind}-0123abcd")
    assert done.effect and set(done.effect) <= set(handler.family.effect_fields)
    assert set(done.heal) <= set(handler.family.undo)
    handler.heal(cluster, done.heal)
    assert cluster.states[1] == "running"


def test_the_cli_lists_the_families_with_targets_of_their_own_from_the_registry(capsys):
    from kafkaproof import cli
    assert cli.main(["fault", "list", "--kinds"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "in scenarios, on consumer:<index>: kill (params: config?), stop (params: config?), pause" in lines
    assert ("in scenarios, on app:<service>, app:<service>:<instance>: kill, stop (params: timeout_s?), pause, "
            "restart") in lines
