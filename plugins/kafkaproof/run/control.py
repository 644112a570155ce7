"""The control channel between a run and the fault tasks of other processes (the nightly DAG's fault tasks).

A run started with `RunOptions(control=NAME)` does not time its faults itself: it waits until
every fault task says it is ready (so a task process that starts slowly cannot make a fault
late), then announces its start (`start.json`: run id, run directory, the monotonic and wall
time of its t0, the faults of its timeline) in `<state>/control/<NAME>/`, and injects or
heals timeline entry `i` when a request file asks for it, answering with an acknowledgement
(what the target resolved to, when the injection began and when it was in effect). Each fault task waits for the start, sleeps until its `at`, asks for the
injection, waits out the fault's `duration` and asks for the heal. Whatever happens to a
task, the run heals every fault when its workload ends, and the cluster's teardown heals
what a crashed run left. Files are written atomically (temporary file, then rename).

The channel is its owner's only: `<state>/control` is a directory of mode 0700 (another user can
neither read the start nor write a request), and the run obeys only request and ready files owned
by its own uid (the file-system counterpart of a socket's `SO_PEERCRED`), refusing others with a
logged reason.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from .. import controlsock
from ..errors import FaultError
from ..paths import state_dir, this_host, write_text_atomic

log = logging.getLogger(__name__)

POLL_S = 0.02


def control_dir(name: str) -> Path:
    """Where a run and its fault tasks meet (one directory per scenario run of a batch)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad control name {name!r}")
    return state_dir() / "control" / name


def _write(path: Path, doc: dict[str, Any]) -> None:
    try:
        write_text_atomic(path, json.dumps(doc, sort_keys=True))
    except PermissionError as e:
        raise controlsock.ControlRefused(_not_owner(path, e)) from e


def _not_owner(path: Path, error: OSError) -> str:
    """The refusal of a run's control directory to a process of another user."""
    top = state_dir() / "control"
    try:
        owner = controlsock.user_label(os.stat(top).st_uid)
    except OSError:
        owner = "the user that started the run"
    return (f"the run control {path.parent} accepts only its owner {owner}; this process runs as "
            f"{controlsock.user_label(os.geteuid())} ({error.strerror})")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    except PermissionError as e:
        raise controlsock.ControlRefused(_not_owner(path, e)) from e


def _owned(path: Path) -> bool:
    """Whether a file exists and belongs to this process's user; a file of another user is refused (logged once)."""
    try:
        uid = os.stat(path).st_uid
    except FileNotFoundError:
        return False
    reason = controlsock.refusal(uid, os.geteuid())
    if reason is None:
        return True
    if path not in _REFUSED:
        _REFUSED.add(path)
        log.warning("ignoring %s: %s", path, reason.replace("connecting process runs", "file was written"))
    return False


_REFUSED: set[Path] = set()


class RunControl:
    """One run's control directory, from either side."""

    def __init__(self, name: str):
        self.name = name
        self.dir = control_dir(name)

    # --- the run's side ------------------------------------------------------
    def reset(self) -> None:
        """Start clean (a retried task must not see the marks of an earlier attempt), in the private (0700)
        directory of run controls."""
        controlsock.private_dir(self.dir.parent)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700)

    def remove(self) -> None:
        """Forget the run's control directory (the cluster's teardown)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_ready(self, indexes: list[int], timeout_s: float) -> None:
        """Until the fault task of every timeline entry in `indexes` is waiting for the start mark."""
        deadline = time.monotonic() + timeout_s
        while True:
            missing = [i for i in indexes if not _owned(self.dir / "ready" / f"{i}.json")]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise FaultError(
                    f"the fault tasks of faults{missing} did not start within {timeout_s:.0f}s of the workload: "
                    "a DAG with fault tasks needs an executor that runs tasks concurrently (the scheduler "
                    "with LocalExecutor, or `airflow dags test --use-executor` beside an `airflow api-server`; "
                    "plain `airflow dags test` runs one task at a time)")
            time.sleep(POLL_S)

    def announce_start(self, run_id: str, run_dir: Path, t0_mono_ns: int, t0_wall: float,
                       faults: list[dict[str, Any]]) -> None:
        """The workload's start mark: fault tasks time their `at` from it."""
        _write(self.dir / "start.json", {"run_id": run_id, "run_dir": str(run_dir), "t0_mono_ns": t0_mono_ns,
                                         "t0_wall": t0_wall, "faults": faults, "pid": os.getpid()})

    def requested(self, index: int, action: str) -> dict[str, Any] | None:
        """A fault task's request to `inject` or `heal` timeline entry `index`, if it came (from this user)."""
        path = self.dir / "requests" / f"{index}-{action}.json"
        return _read(path) if _owned(path) else None

    def task_gone(self, index: int) -> int | None:
        """The pid of entry `index`'s fault task if that process has ended (it was killed, or its
        worker died); None while it lives or where it cannot be seen (another host)."""
        path = self.dir / "ready" / f"{index}.json"
        mark = _read(path) if _owned(path) else None
        if mark is None or mark.get("host") != socket.gethostname():
            return None
        try:
            os.kill(mark["pid"], 0)
        except ProcessLookupError:
            return mark["pid"]
        except PermissionError:
            pass
        return None

    def acknowledge(self, index: int, action: str, result: dict[str, Any]) -> None:
        _write(self.dir / "acks" / f"{index}-{action}.json", result)

    def finish(self, status: str) -> None:
        """The run ended (tasks still waiting give up at once)."""
        _write(self.dir / "done.json", {"status": status})

    # --- a fault task's side -------------------------------------------------
    def mark_ready(self, index: int) -> None:
        """This fault task waits for the start mark (the run starts its workload once all are)."""
        _write(self.dir / "ready" / f"{index}.json", {"index": index, "pid": os.getpid(), "host": socket.gethostname()})

    def wait_started(self, timeout_s: float) -> dict[str, Any]:
        """The run's start mark; FaultError if the run did not start within `timeout_s` or ended first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            start = _read(self.dir / "start.json")
            if start is not None:
                return start
            if self.ended():
                raise FaultError(f"the run of {self.name} ended before its workload started")
            time.sleep(POLL_S)
        raise FaultError(f"the run of {self.name} did not start its workload within {timeout_s:.0f}s")

    def ended(self) -> dict[str, Any] | None:
        return _read(self.dir / "done.json")

    def request(self, index: int, action: str, timeout_s: float) -> dict[str, Any]:
        """Ask the run to `inject` or `heal` entry `index` and wait for its answer (or its end)."""
        _write(self.dir / "requests" / f"{index}-{action}.json", {"index": index, "action": action,
                                                                   "requested_mono_ns": time.monotonic_ns()})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ack = _read(self.dir / "acks" / f"{index}-{action}.json")
            if ack is not None:
                return ack
            done = self.ended()
            if done is not None:
                raise FaultError(f"the run of {self.name} ended ({done['status']}) before it answered "
                                 f"the {action} of faults[{index}]")
            time.sleep(POLL_S)
        raise FaultError(f"the run of {self.name} did not answer the {action} of faults[{index}] "
                         f"within {timeout_s:.0f}s")


def _sleep_until(control: RunControl, mono_s: float) -> None:
    """Sleep until a monotonic time (CLOCK_MONOTONIC is one clock for every process of the host)."""
    while True:
        left = mono_s - time.monotonic()
        if left <= 0:
            return
        if control.ended() is not None:
            raise FaultError(f"the run of {control.name} ended before this fault's time")
        time.sleep(min(left, 0.5))


def check_same_host(name: str, index: int, run_host: str | None, queue: str | None) -> None:
    """A fault task drives its run through files of the run's host: FaultError, naming both hosts and the
    queue, when this task runs on another host than `run_host` (its group's tasks must share a queue)."""
    here = this_host()
    if run_host and run_host != here:
        raise FaultError(
            f"faults[{index}] of {name}: this fault task runs on host {here}, its run on host {run_host}; a fault "
            f"task must run where its run is (it was scheduled on queue {queue or 'default'}: every task of a "
            f"scenario group must carry its host's queue, and only that host's worker may serve it)")


def drive_fault(name: str, index: int, start_timeout_s: float = 1800.0, log=print, run_host: str | None = None,
                queue: str | None = None) -> dict[str, Any]:
    """A fault task: the timeline entry `faults[index]` of the run `name`, timed from its start mark.

    Waits for the start, sleeps until the entry's `at`, asks the run to inject it (the run awaits
    its trigger, if any), waits out its `duration` and asks for the heal. Returns what happened,
    with the injection's lateness against the schedule; FaultError when the run could not inject
    it or ended first; at once when this task runs on another host than `run_host` (`check_same_host`).
    """
    check_same_host(name, index, run_host, queue)
    control = RunControl(name)
    control.mark_ready(index)
    start = control.wait_started(start_timeout_s)
    entry = next((f for f in start["faults"] if f["index"] == index), None)
    if entry is None:
        raise FaultError(f"the run of {name} has no faults[{index}]; its timeline: {start['faults']}")
    t0 = start["t0_mono_ns"] / 1e9
    log(f"faults[{index}] {entry['describe']}: run {start['run_id']}, waiting for t={entry['at']:g}s")
    _sleep_until(control, t0 + entry["at"])
    asked = time.monotonic() - t0
    ack = control.request(index, "inject", timeout_s=entry["trigger_timeout_s"] + 120.0)
    if ack.get("error"):
        raise FaultError(f"faults[{index}] {entry['describe']}: {ack['error']}")
    # Late is when the injection began against the schedule; a graceful stop is in effect seconds later.
    late_ms = round((ack["began_s"] - entry["at"]) * 1000, 1)
    log(f"faults[{index}] injection began at t={ack['began_s']:.3f}s (asked at t={asked:.3f}s, {late_ms:+.1f} ms "
        f"against the schedule), in effect at t={ack['at_s']:.3f}s: {ack['fault_id']} on nodes {ack['nodes'] or '-'}")
    result = {"index": index, "fault": entry["describe"], "fault_id": ack["fault_id"], "nodes": ack["nodes"],
              "scheduled_at_s": entry["at"], "began_at_s": ack["began_s"], "injected_at_s": ack["at_s"],
              "late_ms": late_ms, "triggered": entry["trigger_timeout_s"] > 0}
    if entry["duration"] is not None:
        _sleep_until(control, t0 + ack["at_s"] + entry["duration"])
        healed = control.request(index, "heal", timeout_s=120.0)
        log(f"faults[{index}] healed at t={healed['at_s']:.3f}s")
        result["healed_at_s"] = healed["at_s"]
    return result
