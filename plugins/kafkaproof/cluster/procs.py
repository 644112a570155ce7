"""A registry of the helper processes kafkaproof starts outside a cluster's own state: run workers, Spark drivers.

Brokers and fault proxies are recorded in their cluster's state file (`state.py`). The processes
of a run (producers, consumers) and the Spark drivers kafkaproof launches are recorded here, one
JSON file per owner at `<state>/processes/<owner>.json`, with pid **and** kernel start time
(`process.ProcessRef`), before anything relies on them. When their owner crashes,
`kafkaproof cluster down --all` (`stop_all`) or the teardown of the cluster they ran against
(`stop_for_cluster`) stops them, each with its process group when it leads one (`stop_owner`); a
pid reused by another process is never signalled.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from . import process
from ..errors import FaultError
from ..paths import file_lock, state_dir, write_text_atomic
from .process import ProcessRef

log = logging.getLogger(__name__)


def registry_dir() -> Path:
    return state_dir() / "processes"


def _path(owner: str) -> Path:
    if not owner or "/" in owner or owner.startswith("."):
        raise ValueError(f"bad process owner name {owner!r}")
    return registry_dir() / f"{owner}.json"


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _save(path: Path, entry: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(entry, indent=2, sort_keys=True))


def register(owner: str, role: str, ref: ProcessRef, cluster: str | None = None,
             command: list[str] | None = None) -> None:
    """Record a process of `owner` (e.g. a run id) before it is relied on; `cluster` it runs against, if any."""
    with file_lock(registry_dir() / ".lock"):
        path = _path(owner)
        entry = _load(path) or {"owner": owner, "cluster": cluster, "holder": os.getpid(),
                                "holder_start_ticks": process.start_ticks(os.getpid()), "processes": []}
        if cluster and not entry.get("cluster"):
            entry["cluster"] = cluster
        entry["processes"].append({"role": role, **ref.to_json(), "command": (command or [])[:6]})
        _save(path, entry)


def unregister(owner: str) -> None:
    """Forget an owner whose processes have all ended (its normal clean-up ran)."""
    with file_lock(registry_dir() / ".lock"):
        with contextlib.suppress(FileNotFoundError):
            _path(owner).unlink()


def entries() -> list[dict[str, Any]]:
    """Every registered owner with its processes."""
    if not registry_dir().is_dir():
        return []
    return [e for p in sorted(registry_dir().glob("*.json")) if (e := _load(p))]


def live(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The processes of an owner that still run (same pid *and* start time)."""
    return [p for p in entry.get("processes", [])
            if process.state_of(ProcessRef(p["pid"], p["start_ticks"])) != "dead"]


def stop_owner(owner: str, grace_s: float = 10.0) -> list[str]:
    """Stop every live process of `owner` (SIGCONT, SIGTERM, SIGKILL after `grace_s`); forget the owner.

    A process that leads a process group of its own (services and run workers start in a session of
    their own) is stopped with its whole group, so children that would outlive it (a service's
    `sh -c` wrapper's JVM, its helpers) go too; any other is signalled alone."""
    entry = _load(_path(owner))
    stopped = []
    refs = [(p, ProcessRef(p["pid"], p["start_ticks"])) for p in (live(entry) if entry else [])]
    groups = {ref: process.led_group(ref) for _, ref in refs}  # decided while each still runs
    for _, ref in refs:  # signal all first so they stop in parallel; a paused one cannot stop
        with contextlib.suppress(ProcessLookupError, FaultError):
            if groups[ref] is not None:
                process.signal_group(groups[ref], signal.SIGCONT)
            else:
                process.send_signal(ref, signal.SIGCONT)
    for p, ref in refs:
        if groups[ref] is not None:
            process.terminate_group(ref, groups[ref], grace_s=grace_s)
        else:
            process.terminate(ref, grace_s=grace_s)
        stopped.append(f"{p['role']} (pid {p['pid']})")
    if stopped:
        log.info("stopped the leftover processes of %s: %s", owner, ", ".join(stopped))
    unregister(owner)
    return stopped


def stop_for_cluster(cluster: str) -> list[str]:
    """Stop the processes of every owner that ran against `cluster` (its teardown)."""
    stopped = []
    for entry in entries():
        if entry.get("cluster") == cluster:
            stopped += stop_owner(entry["owner"])
    return stopped


def stop_all() -> list[str]:
    """Stop every registered process, whether its owner (a run) still runs or crashed (`cluster down --all`)."""
    stopped = []
    for entry in entries():
        stopped += stop_owner(entry["owner"])
    return stopped
