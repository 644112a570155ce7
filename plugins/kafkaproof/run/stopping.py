"""Ending a run's workload before it has sent everything, cleanly: `kafkaproof stop RUN_DIR`, or free disk
below the scenario's floor (`limits.min_free_disk_mb`).

For long runs (soak runs: hours of load and random faults). The producers are asked to stop
(SIGTERM: they stop sending and flush what is in flight, bounded), no further fault is injected
and the active ones heal, then the run settles, drains and assembles as always: every value that
was sent is accounted for, and the manifest's `stopped_early` says why and when. Values never
sent are not expected of anyone. A hard stop (SIGINT/SIGTERM of the runner, `timeout_s`) still
ends the run `incomplete`.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Iterable, Mapping

from ..paths import write_text_atomic

STOP_FILE = "STOP"
# Below this much free space (MB) where the run writes its ledger or its cluster its logs, the workload
# stops early: a full disk would fail the brokers and the ledger, which is a lost run, not a result.
DEFAULT_MIN_FREE_DISK_MB = 256


def request_stop(run_dir: Path, reason: str = "stopped by `kafkaproof stop`") -> Path:
    """Ask the run writing `run_dir` to end its workload early (it checks within a second)."""
    path = Path(run_dir) / STOP_FILE
    write_text_atomic(path, json.dumps({"reason": reason, "wall": time.time()}))
    return path


def stop_requested(run_dir: Path) -> str | None:
    """The reason of a stop request for `run_dir`, or None."""
    path = Path(run_dir) / STOP_FILE
    if not path.exists():
        return None
    try:
        return str(json.loads(path.read_text()).get("reason") or "stop requested")
    except (OSError, ValueError):
        return "stop requested"


def free_disk_mb(paths: Iterable[Path]) -> dict[str, float]:
    """Free space (MB) of the filesystem of each existing path."""
    return {str(p): shutil.disk_usage(p).free / 2**20 for p in paths if Path(p).exists()}


def early_stop_reason(requested: str | None, free_mb: Mapping[str, float], min_free_mb: float) -> str | None:
    """Pure: why the workload should end now (a request first, then the first path below the floor), or None."""
    if requested:
        return requested
    for path, free in sorted(free_mb.items()):
        if free < min_free_mb:
            return f"free disk below {min_free_mb:g} MB ({free:.0f} MB left at {path})"
    return None
