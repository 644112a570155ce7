"""Seeded random fault schedules: drawn the same from the same seed, within their bounds, checked up front."""
from __future__ import annotations

import json

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.random_faults import draw_schedule, workload_horizon_s

pytestmark = pytest.mark.unit

SPEC = {"kinds": [{"kind": "kill"}, {"kind": "pause", "weight": 2}, {"kind": "isolate", "targets": ["follower:0"]},
                  {"kind": "packet_loss", "params": {"percent": 30}}],
        "interval_s": [0.5, 4], "duration_s": [1, 3], "quiet_s": 0.5, "max_concurrent": 2}


def doc(**random) -> dict:
    return {"name": "r", "guarantee": "at-least-once", "producers": {"messages": 15000, "rate": 500},
            "faults": {"random": {**SPEC, **random}}}


def test_the_same_seed_draws_the_same_schedule_byte_for_byte_and_another_seed_another():
    a, b, c = draw_schedule(SPEC, 42, 60), draw_schedule(SPEC, 42, 60), draw_schedule(SPEC, 43, 60)
    assert json.dumps(a) == json.dumps(b) and a != c
    assert {f["kind"] for f in a} == {"kill", "pause", "isolate", "packet_loss"}
    assert all(f["params"] == {"percent": 30} for f in a if f["kind"] == "packet_loss")
    assert all(f["target"] == "follower:0" for f in a if f["kind"] == "isolate")


@pytest.mark.parametrize("seed", range(20))
def test_a_schedule_keeps_its_bounds(seed):
    spec = {**SPEC, "start_s": 3, "until_s": 40}
    faults = draw_schedule(spec, seed, horizon_s=999)
    assert faults and faults[0]["at"] == 3
    for f in faults:
        assert 3 <= f["at"] < 40 and f["at"] + f["duration"] <= 40 + 1e-6 and f["duration"] <= 3
    for i, f in enumerate(faults):  # never more than max_concurrent at once; quiet after each heal
        active = [g for g in faults[:i] if g["at"] + g["duration"] > f["at"]]
        assert len(active) < 2
        healed = [g["at"] + g["duration"] for g in faults[:i] if g["at"] + g["duration"] <= f["at"]]
        assert not healed or f["at"] >= max(healed) + 0.5 - 1e-6


def test_a_random_scenario_is_drawn_once_recorded_and_replayed_as_drawn():
    scn = scenario_mod.Scenario("r", "r.yaml", scenario_mod.validate_document(doc(), "r.yaml"))
    assert scn.timeline() == [] and scn.random_faults["interval_s"] == [0.5, 4]
    drawn = scn.with_random_schedule(seed=5)
    assert drawn.data["random_faults"]["seed"] == 5
    assert drawn.data["faults"] == draw_schedule(SPEC, 5, 30.0, [1, 2, 3], [1, 2, 3])
    assert not [f for f in drawn.data["faults"] if f["target"] == "random"]  # the nodes are drawn too
    assert {f["target"] for f in drawn.data["faults"] if f["kind"] == "isolate"} == {"follower:0"}
    assert scn.with_random_schedule(seed=5, known_nodes=False).data["faults"] == draw_schedule(SPEC, 5, 30.0)
    assert len(drawn.timeline()) == len(drawn.data["faults"])
    assert drawn.with_random_schedule(seed=6) is drawn  # a drawn scenario (a replay) is not drawn again
    seeded = scenario_mod.Scenario("r", "r.yaml", scenario_mod.validate_document(doc(seed=9), "r.yaml"))
    assert seeded.with_random_schedule(seed=5).data["random_faults"]["seed"] == 9  # the file's seed wins
    assert workload_horizon_s({"messages": 15000, "rate": 500}) == 30.0


@pytest.mark.parametrize("random, message", [
    ({"interval_s": [3, 1]}, "faults.random.interval_s: [3, 1]: the minimum is above the maximum"),
    ({"kinds": [{"kind": "rolling_upgrade"}]}, "faults.random.kinds.0.kind: 'rolling_upgrade' is not allowed"),
    ({"kinds": [{"kind": "packet_loss"}]}, "faults.random.kinds[0].params.percent: required for packet_loss"),
    ({"kinds": [{"kind": "kill", "targets": ["leader:7"]}]}, "partition 7 does not exist"),
    ({"kinds": [{"kind": "kill", "targets": ["consumer:0"]}]}, "random schedules target the cluster"),
    ({"kinds": [{"kind": "kill", "targets": ["app:web"]}]}, "'app:web': random schedules target the cluster, not the "
                                                             "run's consumers or application services"),
])
def test_a_random_schedule_that_cannot_run_is_refused_naming_the_field(random, message):
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        scenario_mod.Scenario("r", "r.yaml", scenario_mod.validate_document(doc(**random), "r.yaml")).with_random_schedule(1)


def test_proxy_kinds_in_a_random_schedule_bring_the_fault_proxy():
    data = scenario_mod.validate_document(doc(kinds=[{"kind": "lost_ack", "params": {"every": 10}}]), "r.yaml")
    assert data["cluster"]["proxy"] is True
