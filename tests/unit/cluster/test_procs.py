"""The process registry: helper processes of a crashed run are found and stopped, others never signalled."""
from __future__ import annotations

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
