"""Identify and signal processes we started, and only those.

A pid alone can be reused after its process dies; we keep the kernel's start
time of the process (field 22 of /proc/<pid>/stat) next to it and refuse to
signal a pid whose start time differs.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import FaultError


@dataclass(frozen=True)
class ProcessRef:
    pid: int
    start_ticks: int

    def to_json(self) -> dict:
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @staticmethod
    def from_json(d: dict | None) -> "ProcessRef | None":
        return ProcessRef(d["pid"], d["start_ticks"]) if d else None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces; split after its closing paren.
    rest = raw[raw.rindex(")") + 2:].split()
    return rest  # rest[0] is field 3 (state)


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def ref_for(pid: int) -> ProcessRef:
    ticks = start_ticks(pid)
    if ticks is None:
        raise FaultError(f"process {pid} is gone")
    return ProcessRef(pid, ticks)


def state_of(ref: ProcessRef | None) -> str:
    """'running', 'paused', or 'dead' (gone, zombie, or pid reused by another process)."""
    if ref is None:
        return "dead"
    fields = _stat_fields(ref.pid)
    if fields is None or int(fields[19]) != ref.start_ticks:
        return "dead"
    code = fields[0]
    if code in ("Z", "X", "x"):
        return "dead"
    return "paused" if code in ("T", "t") else "running"


def send_signal(ref: ProcessRef, sig: int) -> None:
    """Signal a process we started; refuse if the pid now belongs to someone else."""
    if state_of(ref) == "dead":
        raise FaultError(f"process {ref.pid} is not running (or is no longer the one kafkaproof started)")
    os.kill(ref.pid, sig)


def wait_dead(ref: ProcessRef, timeout_s: float, reap: "callable | None" = None) -> bool:
    """Wait until the process is gone; returns False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reap:
            reap()
        if state_of(ref) == "dead":
            return True
        time.sleep(0.05)
    return state_of(ref) == "dead"


def terminate(ref: ProcessRef | None, grace_s: float = 10.0, reap=None) -> None:
    """SIGCONT (a paused JVM ignores SIGTERM until resumed), SIGTERM, then SIGKILL after `grace_s`."""
    if ref is None or state_of(ref) == "dead":
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(ref.pid, sig)
        except ProcessLookupError:
            return
    if not wait_dead(ref, grace_s, reap):
        try:
            os.kill(ref.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_dead(ref, 5.0, reap)


def led_group(ref: ProcessRef) -> int | None:
    """The process group `ref` leads (its pgid is its pid, e.g. started with `start_new_session`) while it
    runs; None when it is gone, leads none, or the group is our own (never ours to signal)."""
    if state_of(ref) == "dead":
        return None
    fields = _stat_fields(ref.pid)
    pgid = int(fields[2]) if fields else None  # field 5 of /proc/<pid>/stat
    return pgid if pgid == ref.pid and pgid != os.getpgrp() else None


def group_members(pgid: int) -> list[int]:
    """The live processes (not zombies) in process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X", "x"):
            members.append(int(entry))
    return members


def signal_group(pgid: int, sig: int) -> bool:
    """Signal every process of group `pgid` (from `led_group`); False when the group is empty."""
    if pgid == os.getpgrp():
        raise ValueError(f"process group {pgid} is kafkaproof's own; refusing to signal it")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def terminate_group(ref: ProcessRef, pgid: int, grace_s: float = 10.0, reap=None) -> None:
    """`terminate` for a process leading group `pgid` (`led_group(ref)`, taken while it ran): every process of
    the group gets SIGCONT and SIGTERM, then `kill_group_after`."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        if not signal_group(pgid, sig):
            return
    kill_group_after(ref, pgid, grace_s, reap)


def kill_group_after(ref: ProcessRef, pgid: int, grace_s: float, reap=None) -> None:
    """Wait up to `grace_s` until the leader `ref` and every process of its group `pgid` are gone, then SIGKILL
    what is left of the group, so children that outlive the leader go with it. Children that left the group
    (their own `setsid`) are not followed."""
    def gone() -> bool:
        if reap:
            reap()
        return state_of(ref) == "dead" and not group_members(pgid)

    def wait(timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not gone():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True
    if not wait(grace_s) and signal_group(pgid, signal.SIGKILL):
        wait(5.0)


def module_env() -> dict[str, str]:
    """This process's environment, with the directory that holds the `kafkaproof` package first on
    PYTHONPATH: for `python -m kafkaproof...` helpers (proxies, disks) started from any working directory."""
    package_parent = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)}


def die_with_parent(argv: list[str]) -> list[str]:
    """Prefix `argv` so the program gets SIGKILL when this process dies (util-linux `setpriv --pdeathsig`).

    For helpers that must not outlive their caller (a storage format, a Spark driver). Only from
    the main thread or a thread that outlives the child: the kernel signals when the *thread*
    that started the child ends.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def find_by_cmdline(marker: str) -> list[ProcessRef]:
    """Live processes whose command line contains `marker` (e.g. a cluster's state directory).

    The last line of defence of a teardown: a process started an instant before a crash,
    before its pid reached the state file, still names the cluster's files on its command line.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            ticks = start_ticks(int(entry))
            if ticks is not None:
                found.append(ProcessRef(int(entry), ticks))
    return found
