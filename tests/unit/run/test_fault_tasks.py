"""Fault tasks of another process time a run's faults through its control directory (no cluster)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafkaproof.errors import FaultError
from kafkaproof.run import control as control_mod
from kafkaproof.run import timeline as timeline_mod
from kafkaproof.run.control import RunControl, drive_fault
from kafkaproof.run.timeline import Timeline
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.scenario import TimelineFault

pytestmark = pytest.mark.unit


@dataclass
class Injected:
    fault_id: str
    nodes: list[int]


@dataclass
class FakeInjector:
    """Records when each fault was injected and healed (seconds on the monotonic clock)."""

    injected: list[str] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)

    def inject(self, spec: FaultSpec, annotations=None) -> Injected:
        fid = f"{spec.kind}-{len(self.times)}"
        self.injected.append(fid)
        self.times[fid] = [time.monotonic()]
        return Injected(fid, [2])

    def heal(self, fid: str) -> None:
        self.injected.remove(fid)
        self.times[fid].append(time.monotonic())


class FakeRun:
    def __init__(self, entries: list[TimelineFault]):
        self.entries, self.fault_errors = entries, []
        self.scenario = self

    def timeline(self) -> list[TimelineFault]:
        return self.entries


def start_run(tmp_path: Path, monkeypatch, entries: list[TimelineFault]) -> tuple[Timeline, FakeInjector, float]:
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    control = RunControl("af-test")
    control.reset()
    run, injector, t0 = FakeRun(entries), FakeInjector(), time.monotonic()
    timeline = Timeline(run, injector, workers=None, t0=t0, control=control)
    control.announce_start("run-1", tmp_path / "run-1", int(t0 * 1e9), time.time(),
                           [{"index": e.index, "at": e.at, "duration": e.duration, "describe": e.describe(),
                             "trigger_timeout_s": 0.0} for e in entries])
    timeline.start()
    return timeline, injector, t0


def test_fault_tasks_inject_and_heal_on_schedule(tmp_path, monkeypatch):
    entries = [TimelineFault(0.3, FaultSpec("kill", "leader:0"), 0.4, 0),
               TimelineFault(0.5, FaultSpec("isolate", "follower:0"), None, 1)]
    timeline, injector, t0 = start_run(tmp_path, monkeypatch, entries)
    results: dict[int, dict] = {}
    tasks = [threading.Thread(target=lambda i=i: results.update({i: drive_fault("af-test", i, 5, log=lambda m: None)}))
             for i in (0, 1)]
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(10)
    assert timeline.finished() and not timeline.run.fault_errors
    kill, isolate = results[0], results[1]
    assert kill["nodes"] == [2] and kill["scheduled_at_s"] == 0.3 and 0 <= kill["late_ms"] < 250
    assert kill["began_at_s"] <= kill["injected_at_s"]
    assert kill["healed_at_s"] == pytest.approx(kill["injected_at_s"] + 0.4, abs=0.25)
    assert injector.times[kill["fault_id"]][0] - t0 == pytest.approx(0.3, abs=0.25)
    assert "healed_at_s" not in isolate and injector.injected == [isolate["fault_id"]]  # healed when the workload ends
    timeline.heal_everything()
    assert injector.injected == []


def test_a_fault_task_that_never_asks_makes_the_run_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(timeline_mod, "REQUEST_GRACE_S", 0.3)
    timeline, injector, _ = start_run(tmp_path, monkeypatch, [TimelineFault(0.1, FaultSpec("kill", "leader:0"), 1, 0)])
    deadline = time.monotonic() + 5
    while not timeline.finished() and time.monotonic() < deadline:
        time.sleep(0.05)
    (error,) = timeline.run.fault_errors
    assert "its fault task did not ask for the inject" in error and "never injected" in error
    assert injector.times == {}


def test_a_fault_task_gives_up_when_the_run_ends_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    control = RunControl("af-test")
    control.reset()
    control.announce_start("run-1", tmp_path, time.monotonic_ns(), time.time(),
                           [{"index": 0, "at": 30, "duration": None, "describe": "kill leader:0 at 30s",
                             "trigger_timeout_s": 0.0}])
    control.finish("error")
    with pytest.raises(FaultError, match="ended before this fault's time"):
        drive_fault("af-test", 0, 5, log=lambda m: None)
    with pytest.raises(FaultError, match="has no faults\\[3\\]"):
        drive_fault("af-test", 3, 5, log=lambda m: None)
    assert control_mod.control_dir("af-test") == tmp_path / "control" / "af-test"


def test_the_run_starts_its_workload_once_every_fault_task_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    control = RunControl("af-test")
    control.reset()
    control.mark_ready(0)
    with pytest.raises(FaultError, match=r"faults\[1\] did not start .* needs an executor that runs tasks concurrently"):
        control.wait_ready([0, 1], 0.1)
    threading.Timer(0.2, control.mark_ready, args=(1,)).start()
    started = time.monotonic()
    control.wait_ready([0, 1], 5)
    assert 0.15 < time.monotonic() - started < 2
    control.remove()
    assert not control.dir.exists()


def test_a_fault_task_killed_mid_fault_is_healed_by_the_run_at_once(tmp_path, monkeypatch):
    timeline, injector, t0 = start_run(tmp_path, monkeypatch, [TimelineFault(0.2, FaultSpec("kill", "leader:0"), 60, 0)])
    task = subprocess.Popen([sys.executable, "-c", "from kafkaproof.run.control import drive_fault; "
                             "drive_fault('af-test', 0, 10)"], env={**os.environ, "KAFKAPROOF_STATE": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while not injector.injected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert injector.injected, "the fault task never had the fault injected"
        task.kill()  # mid-fault: 60 s before its heal
        task.wait(5)
        killed = time.monotonic()
        while injector.injected and time.monotonic() < killed + 5:
            time.sleep(0.02)
    finally:
        task.kill()
    assert injector.injected == [] and time.monotonic() - killed < 2  # healed now, not 60 s later
    (error,) = timeline.run.fault_errors  # the fault did not last as scheduled: the run is no verdict
    assert f"its fault task (pid {task.pid}) ended before it asked for the heal; the run healed it" in error


# Correlated faults (issue 45.2): the faults of a group start at one instant, through one barrier in the
# timeline, whether the run times them itself or the DAG's fault tasks ask for them.


def _pair(at: float = 0.2) -> list[TimelineFault]:
    return [TimelineFault(at, FaultSpec("kill", "node:1"), None, 0, group=0),
            TimelineFault(at, FaultSpec("pause", "node:2"), None, 1, group=0)]


def test_a_group_is_injected_at_one_instant_by_the_run():
    injector, t0 = FakeInjector(), time.monotonic()
    timeline = Timeline(FakeRun(_pair()), injector, workers=None, t0=t0)
    timeline.start()
    deadline = time.monotonic() + 5
    while not timeline.finished() and time.monotonic() < deadline:
        time.sleep(0.02)
    starts = [times[0] for times in injector.times.values()]
    assert len(starts) == 2 and not timeline.run.fault_errors
    assert max(starts) - min(starts) < 0.05
    timeline.heal_everything()


def test_fault_tasks_asking_apart_start_their_group_at_the_later_request(tmp_path, monkeypatch):
    timeline, injector, t0 = start_run(tmp_path, monkeypatch, _pair())
    results: dict[int, dict] = {}

    def task(i: int, delay: float) -> None:
        time.sleep(delay)
        results[i] = drive_fault("af-test", i, 5, log=lambda m: None)
    tasks = [threading.Thread(target=task, args=(0, 0.0)), threading.Thread(target=task, args=(1, 0.5))]
    for t in tasks:
        t.start()
    for t in tasks:
        t.join(10)
    starts = sorted(times[0] - t0 for times in injector.times.values())
    assert len(starts) == 2 and not timeline.run.fault_errors
    assert starts[1] - starts[0] < 0.05 and starts[0] > 0.4  # the first waited for the second's request
    timeline.heal_everything()


def test_a_group_member_whose_task_never_asks_stops_the_whole_group(tmp_path, monkeypatch):
    monkeypatch.setattr(timeline_mod, "REQUEST_GRACE_S", 0.3)
    timeline, injector, _ = start_run(tmp_path, monkeypatch, _pair(0.1))
    answers: list[str] = []

    def task() -> None:  # faults[0]'s task asks; faults[1]'s never does
        try:
            drive_fault("af-test", 0, 3, log=lambda m: None)
        except FaultError as e:
            answers.append(str(e))
    asker = threading.Thread(target=task)
    asker.start()
    deadline = time.monotonic() + 5
    while not timeline.finished() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert injector.times == {}  # neither fault of the group was injected
    asker.join(10)
    assert any("did not ask for the inject" in e for e in timeline.run.fault_errors)
    assert answers and "not injected" in answers[0]
