"""Correlated faults (issue 45.2): `together` blocks, their refusals, and random schedules drawing combinations."""
from __future__ import annotations

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.spec import random_faults, scenario as scenario_mod, together

pytestmark = pytest.mark.unit

BASE = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}


def _load(faults, **extra):
    return scenario_mod.validate_document({**BASE, "faults": faults, **extra}, "s.yaml")


def test_a_together_block_expands_into_one_group_at_one_instant():
    data = _load([{"at": 1, "kind": "isolate", "target": "node:3", "duration": 2},
                  {"at": 5, "together": [{"kind": "kill", "target": "node:1", "duration": 3},
                                         {"kind": "pause", "target": "node:2"}]}])
    assert [(f["kind"], f["at"], f.get("group")) for f in data["faults"]] == [
        ("isolate", 1, None), ("kill", 5, 1), ("pause", 5, 1)]
    entries = scenario_mod.Scenario("t", "", data).timeline()
    assert [e.group for e in entries] == [None, 1, 1] and entries[1].duration == 3


@pytest.mark.parametrize("members,field,words", [
    ([{"kind": "rolling_restart", "params": {"config": {"a.b": 1}}},
      {"kind": "rolling_restart", "target": "node:2", "params": {"config": {"a.b": 2}}}], "faults[0].together",
     "two rolls of one node"),
    ([{"kind": "kill", "target": "node:1"}, {"kind": "pause", "target": "nodes:1,2"}], "faults[0].together",
     "two faults that change one node's process"),
    ([{"kind": "isolate", "target": "leader:0"}, {"kind": "isolate", "target": "leader:0"}], "faults[0].together",
     "the same kind (isolate) twice on one node"),
    ([{"kind": "kill", "target": "node:1"}], "faults.0.together", "too short"),
    ([{"kind": "kill", "target": "node:1", "at": 3}, {"kind": "pause", "target": "node:2"}],
     "faults.0.together.0", "unknown field(s) 'at'"),
])
def test_groups_that_cannot_run_at_once_are_refused_naming_the_field(members, field, words):
    with pytest.raises(ScenarioError) as e:
        _load([{"at": 2, "together": members}])
    assert field in str(e.value) and words in str(e.value)


def test_groups_on_different_nodes_or_of_different_natures_are_allowed():
    _load([{"at": 2, "together": [{"kind": "kill", "target": "node:1"}, {"kind": "pause", "target": "node:2"},
                                  {"kind": "isolate", "target": "node:1"}]}])
    assert together.static_nodes("brokers", 3, [1, 2, 3, 101]) == {1, 2, 3}
    assert together.static_nodes("leader:0", 3, [1, 2, 3]) is None


def test_random_schedules_draw_combinations_on_distinct_nodes_and_keep_old_draws():
    spec = {"kinds": [{"kind": "kill"}], "interval_s": [3, 5], "duration_s": [2, 4]}
    before = random_faults.draw_schedule(spec, 7, 30, [1, 2, 3], [1, 2, 3])
    combos = {**spec, "combinations": [{"faults": [{"kind": "power_loss"}, {"kind": "pause"}], "weight": 3}]}
    drawn = random_faults.draw_schedule(combos, 7, 30, [1, 2, 3], [1, 2, 3])
    assert "group" not in str(before) and all("group" not in f for f in before)
    groups = together.groups(drawn)
    assert groups, "a combination was drawn"
    for group, positions in groups.items():
        members = [drawn[p] for p in positions]
        assert positions[0] == group and [m["kind"] for m in members] == ["power_loss", "pause"]
        assert len({m["target"] for m in members}) == 2 and len({(m["at"], m["duration"]) for m in members}) == 1
    data = _load({"random": {**combos, "seed": 7, "until_s": 30}}, cluster={"disk": True})
    drawn_scenario = scenario_mod.Scenario("t", "s.yaml", data).with_random_schedule()
    assert together.groups(drawn_scenario.data["faults"])


def test_a_combination_of_an_unknown_kind_is_refused():
    with pytest.raises(ScenarioError, match="combinations"):
        _load({"random": {"kinds": [{"kind": "kill"}], "interval_s": [1, 2], "duration_s": [1, 2],
                          "combinations": [{"faults": [{"kind": "kill"}, {"kind": "explode"}]}]}})


def test_a_together_block_may_wait_for_one_trigger_for_all_its_faults():
    after = {"event": "isr_shrunk", "partition": 0, "timeout_s": 30}
    data = _load([{"at": 4, "after": after, "together": [{"kind": "kill", "target": "node:1"},
                                                          {"kind": "pause", "target": "node:2", "duration": 2}]}],
                 topic={"replication_factor": 3})
    assert [(f["kind"], f["at"], f["after"], f["group"]) for f in data["faults"]] == [
        ("kill", 4, after, 0), ("pause", 4, after, 0)]
    entries = scenario_mod.Scenario("t", "", data).timeline()
    assert [e.after for e in entries] == [after, after] and "after isr_shrunk 0" in entries[0].describe()
    with pytest.raises(ScenarioError, match=r"faults.0.together.1: unknown field\(s\) 'after'"):
        _load([{"at": 4, "together": [{"kind": "kill", "target": "node:1"},
                                      {"kind": "pause", "target": "node:2", "after": after}]}])
    with pytest.raises(ScenarioError, match=r"faults\[1\].after: a fault of group 0 starts with the others, on the "
                                            r"group's one trigger"):
        _load([{"at": 4, "kind": "kill", "target": "node:1", "group": 0, "after": after},
               {"at": 4, "kind": "pause", "target": "node:2", "group": 0}], topic={"replication_factor": 3})
    with pytest.raises(ScenarioError, match=r"faults\[\d\].after.partition: partition 5 does not exist"):
        _load([{"at": 4, "after": {"event": "isr_shrunk", "partition": 5},
                "together": [{"kind": "kill", "target": "node:1"}, {"kind": "pause", "target": "node:2"}]}],
              topic={"replication_factor": 3})


def test_the_run_awaits_a_groups_trigger_once_and_its_faults_share_the_answer():
    import threading
    import time
    from types import SimpleNamespace
    from kafkaproof.run.timeline import Timeline
    timeline = Timeline.__new__(Timeline)
    timeline._group_locks, timeline._group_triggers = {0: threading.Lock()}, {}
    calls = []

    def await_trigger(entry):
        calls.append(entry.index)
        time.sleep(0.2)
        return {"trigger": {"event": "isr_shrunk", "waited_s": 0.2}}
    timeline._await_trigger = await_trigger
    got = []
    threads = [threading.Thread(target=lambda i=i: got.append(timeline._group_trigger(SimpleNamespace(index=i, group=0))))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got == [{"trigger": {"event": "isr_shrunk", "waited_s": 0.2}}] * 3
