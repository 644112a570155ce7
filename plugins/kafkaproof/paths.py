"""Where kafkaproof keeps its caches and state. Overridable with environment variables."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """Download cache (Kafka distributions): `$KAFKAPROOF_CACHE` or `~/.cache/kafkaproof`."""
    return Path(os.environ.get("KAFKAPROOF_CACHE") or Path.home() / ".cache" / "kafkaproof")


def state_dir() -> Path:
    """Live cluster state (data dirs, logs, state files): `$KAFKAPROOF_STATE` or `~/.local/state/kafkaproof`."""
    return Path(os.environ.get("KAFKAPROOF_STATE") or Path.home() / ".local" / "state" / "kafkaproof")


def runs_dir() -> Path:
    """Default parent of run directories: `$KAFKAPROOF_RUNS` or `./runs`."""
    return Path(os.environ.get("KAFKAPROOF_RUNS") or "runs")


SOURCE_ROOT = Path(__file__).resolve().parents[2]  # plugins/kafkaproof/paths.py -> the checkout


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (for `scenarios/`, `spark/`, `expectations/`)."""
    return SOURCE_ROOT if (SOURCE_ROOT / "scenarios").is_dir() else None


def write_text_atomic(path: Path, text: str) -> Path:
    """Replace `path` with `text` at once: readers see the old file or the new one, never a part.

    The temporary file has a name of its own, so writers in several threads or processes
    (drivers started at once, a run and its fault tasks) never move each other's file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".tmp", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
    return path
