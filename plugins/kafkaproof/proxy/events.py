"""Event sinks: where the proxy reports every action it takes.

An event is a flat JSON object (see docs/proxy.md for the fields). A sink is any
callable taking that dict; :class:`JsonlEventSink` appends one JSON line per
event and flushes it at once, so a proxy killed mid-run loses nothing it
reported.
"""
from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

EventSink = Callable[[dict[str, Any]], None]


def stamp(event: str, **fields: Any) -> dict[str, Any]:
    """A new event dict with its clocks: monotonic ns (the ledger's clock) and wall-clock time."""
    wall_ns = time.time_ns()
    out: dict[str, Any] = {
        "event": event,
        "ts_ns": time.monotonic_ns(),
        "wall_ns": wall_ns,
        "wall": datetime.datetime.fromtimestamp(wall_ns / 1e9, tz=datetime.timezone.utc)
        .isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


class JsonlEventSink:
    """Append events as JSON lines to a file (created with its parent directory if missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._file is None:
                return
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        """Close the file; later events are dropped."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class MemoryEventSink:
    """Keep events in a list (tests, or a caller that wants them in-process)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def of(self, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Events of one kind (any kind if None) whose fields equal ``match``."""
        return [e for e in self.events
                if (event is None or e["event"] == event) and all(e.get(k) == v for k, v in match.items())]


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Load a JSON-lines event file (a torn last line, from a killed proxy, is skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out
