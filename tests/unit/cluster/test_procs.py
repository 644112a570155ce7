"""The process registry: helper processes of a crashed run are found and stopped, others never signalled."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from kafkaproof.cluster import process, procs

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))


def _sleeper(*args: str) -> subprocess.Popen:
    code = "; ".join(["import signal, time", *args, "time.sleep(60)"])
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_stop_for_cluster_and_stop_all():
    a, b, c = _sleeper(), _sleeper(), _sleeper()
    try:
        procs.register("run-a", "producer-0", process.ref_for(a.pid), cluster="c1")
        procs.register("run-a", "consumer-0-0", process.ref_for(b.pid), cluster="c1")
        procs.register("run-b", "producer-0", process.ref_for(c.pid), cluster="c2")
        assert {e["owner"] for e in procs.entries()} == {"run-a", "run-b"}
        stopped = procs.stop_for_cluster("c1")
        assert sorted(stopped) == sorted([f"producer-0 (pid {a.pid})", f"consumer-0-0 (pid {b.pid})"])
        assert a.wait(5) is not None and b.wait(5) is not None and c.poll() is None
        assert procs.stop_all() == [f"producer-0 (pid {c.pid})"]
        assert c.wait(5) is not None and procs.entries() == []
    finally:
        for p in (a, b, c):
            p.kill()


def test_a_worker_that_ignores_sigterm_is_killed_and_a_reused_pid_is_never_signalled():
    stubborn = _sleeper("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    time.sleep(0.3)
    other = _sleeper()
    try:
        procs.register("run-c", "consumer-0-0", process.ref_for(stubborn.pid))
        # A pid recorded with another start time (the process died and the pid was reused): left alone.
        procs.register("run-c", "producer-0", process.ProcessRef(other.pid, process.start_ticks(other.pid) + 1))
        started = time.monotonic()
        assert procs.stop_owner("run-c", grace_s=1.0) == [f"consumer-0-0 (pid {stubborn.pid})"]
        assert stubborn.wait(5) is not None and time.monotonic() - started < 5
        assert other.poll() is None
    finally:
        stubborn.kill()
        other.kill()


def _shell(script: str) -> tuple[subprocess.Popen, int]:
    """A shell leading a session (as services and run workers are started) that starts a child and prints its pid."""
    shell = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True)
    return shell, int(shell.stdout.readline())


def _kill_group(shell: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(shell.pid, signal.SIGKILL)  # the shell leads its group: whatever a failed test left
    shell.wait(5)


def _gone(pid: int, ticks: int, timeout_s: float = 5.0) -> bool:
    return process.wait_dead(process.ProcessRef(pid, ticks), timeout_s)  # a zombie nobody reaps counts as gone


def test_stop_all_stops_a_group_leader_with_the_children_that_would_outlive_it():
    shell, child = _shell("sleep 60 & echo $!; wait")
    child_ticks = process.start_ticks(child)
    try:
        procs.register("r1-services", "service", process.ref_for(shell.pid))
        assert process.led_group(process.ref_for(shell.pid)) == shell.pid
        assert procs.stop_all() == [f"service (pid {shell.pid})"]
        assert shell.wait(5) is not None and _gone(child, child_ticks) and procs.entries() == []
    finally:
        _kill_group(shell)


def test_a_child_that_ignores_sigterm_is_killed_with_its_group_after_the_leader_exited():
    shell, child = _shell("(trap '' TERM; exec sleep 60) & echo $!; wait")
    child_ticks = process.start_ticks(child)
    try:
        procs.register("r2-services", "service", process.ref_for(shell.pid))
        started = time.monotonic()
        procs.stop_owner("r2-services", grace_s=1.0)
        assert shell.wait(5) is not None and _gone(child, child_ticks, 0) and time.monotonic() - started < 5
    finally:
        _kill_group(shell)


def test_a_process_that_leads_no_group_is_signalled_alone():
    shell, child = _shell("sleep 60 & echo $!; sleep 60")
    in_our_group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process.led_group(process.ref_for(in_our_group.pid)) is None  # never kafkaproof's own group
        assert process.led_group(process.ref_for(child)) is None  # in the shell's group, not its leader
        procs.register("r3", "consumer-0-0", process.ref_for(child))
        procs.register("r3", "producer-0", process.ref_for(in_our_group.pid))
        assert len(procs.stop_owner("r3", grace_s=1.0)) == 2
        assert in_our_group.wait(5) is not None and shell.poll() is None  # the child's leader is left alone
    finally:
        _kill_group(shell)
        in_our_group.kill()
