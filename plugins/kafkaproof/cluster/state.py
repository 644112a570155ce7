"""Persistent state of live clusters: what we started, so any process can heal and tear it down.

One JSON file per cluster at `<state_dir>/clusters/<name>/state.json`, updated
under an exclusive file lock. `kafkaproof cluster down` reads it after a crash
to kill our processes, heal our faults and remove our namespaces.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from ..errors import ClusterError, ClusterNotRunning
from ..paths import state_dir, write_text_atomic
from ..spec.cluster import check_cluster_name
from . import slots



def state_id() -> str:
    """A short id of this state directory (its resolved path's hash): what names this state's resources
    that live beyond it, on the host or its Docker engine (compose projects), apart from another's."""
    return hashlib.sha1(str(state_dir().resolve()).encode()).hexdigest()[:8]


def cluster_dir(name: str) -> Path:
    return state_dir() / "clusters" / check_cluster_name(name)


def state_path(name: str) -> Path:
    return cluster_dir(name) / "state.json"


def list_clusters() -> list[str]:
    """Names of clusters that have a state file."""
    root = state_dir() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/state.json"))


def load_state(name: str) -> dict[str, Any]:
    path = state_path(name)
    if not path.exists():
        raise ClusterNotRunning(f"no cluster named {name!r} is running (no {path}); start one with `kafkaproof cluster up`")
    try:
        return json.loads(path.read_text())
    except PermissionError as e:
        raise ClusterError(f"cluster {name!r} is another user's: its state file {path} and fault controls are "
                           f"its owner's only; run this as that user ({e.strerror})") from e


def save_state(name: str, state: dict[str, Any]) -> None:
    """Replace the cluster's state file at once. Only its owner can read it (mode 0600): it holds the
    cluster's client settings, a secured cluster's password among them."""
    write_text_atomic(state_path(name), json.dumps(state, indent=2, sort_keys=True), private=True)


def remove_state(name: str) -> None:
    """Forget a cluster that is down: its state file, and its claim of a host-wide slot (`slots`)."""
    path = state_path(name)
    try:
        slot = json.loads(path.read_text()).get("slot")
    except (FileNotFoundError, ValueError):
        slot = None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if slot:
        slots.release(slot, path)


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Exclusive lock on one cluster's state across processes."""
    d = cluster_dir(name)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def update_state(name: str) -> Iterator[dict[str, Any]]:
    """Load, let the caller mutate, and save a cluster's state under the lock."""
    with locked(name):
        state = load_state(name)
        yield state
        save_state(name, state)
