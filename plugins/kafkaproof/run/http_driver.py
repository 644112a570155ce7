"""Open-loop HTTP driver for the application under test (issue 39): one request per event.

A run drives its application with it (`run/app_run.py`). `drive` sends request `seq` (0, 1, ...) of a `RequestTemplate` at its
intended time `start + seq / rate`, from a bounded pool of worker threads, each with its own
keep-alive `http.client` connections. Open loop: a slow answer never moves a later intended time;
when every worker is busy, later requests go out late and their latency, measured from the intended
time, shows it. Bounded always: at most `messages` requests, none intended after `duration_s`, and a
`stop` event ends it early. Each request's outcome comes from `spec.application.classify`.

The result is an Arrow table (`HTTP_SENDS`) whose columns mirror the ledger's sends table where they
mean the same (seq, intended_ns, send_ns, complete_ns, outcome, error_message).
"""
from __future__ import annotations

import http.client
import logging
import math
import select
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Mapping

import pyarrow as pa

from ..spec.application import ACCEPTED, OUTCOMES, RequestTemplate, classify, failure_kind
from ..spec.application import event_id as run_event_id

log = logging.getLogger(__name__)

HTTP_SENDS = pa.schema([
    ("seq", pa.int64()),
    ("event_id", pa.string()),
    ("worker", pa.int32()),
    ("intended_ns", pa.int64()),
    ("send_ns", pa.int64()),        # just before connecting (when needed) and writing the request
    ("complete_ns", pa.int64()),    # the whole answer read, or the failure seen
    ("outcome", pa.string()),       # accepted, rejected, indefinite (spec.application.OUTCOMES)
    ("status", pa.int32()),         # the HTTP status; null when there was none
    ("failure", pa.string()),       # timeout, reset, refused (spec.application.FAILURE_OUTCOMES); null with a status
    ("error_message", pa.string()),  # first ERROR_BODY_BYTES of a non-2xx body, or the exception's words
])
ERROR_BODY_BYTES = 200
DEFAULT_WORKERS = 32


@dataclass
class _Row:
    seq: int
    event_id: str
    worker: int
    intended_ns: int
    send_ns: int
    complete_ns: int
    outcome: str
    status: int | None
    failure: str | None
    error_message: str | None


class _Clock:
    """Wall-clock nanoseconds that never go back: monotonic, anchored to the wall clock at start."""

    def __init__(self) -> None:
        self.offset = time.time_ns() - time.monotonic_ns()

    def now(self) -> int:
        return time.monotonic_ns() + self.offset


class _Connections:
    """One worker's keep-alive connections, one per scheme and host:port."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.open: dict[tuple[str, str], http.client.HTTPConnection] = {}

    def get(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        key = (scheme, netloc)
        conn = self.open.get(key)
        # An idle keep-alive socket that is readable was closed by the server (EOF): reconnecting
        # here keeps that from looking like a reset of the next request.
        if conn is not None and conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            conn.close()
        if conn is None:
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conn = self.open[key] = cls(netloc, timeout=self.timeout_s)
        return conn

    def drop(self, scheme: str, netloc: str) -> None:
        conn = self.open.pop((scheme, netloc), None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self.open.values():
            conn.close()
        self.open.clear()


def _send_one(request: RequestTemplate, connections: _Connections, clock: _Clock
             ) -> tuple[int, int, str, int | None, str | None, str | None]:
    """One rendered request on a worker's connections: (send_ns, complete_ns, outcome, status,
    failure, error_message). Raises an exception that `failure_kind` does not know (a bug, not an answer)."""
    url = urllib.parse.urlsplit(request.url)
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    send_ns = clock.now()
    try:
        conn = connections.get(url.scheme, url.netloc)
        conn.request(request.method, target, body=request.body_bytes or None, headers=request.headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as e:
        complete_ns = clock.now()
        connections.drop(url.scheme, url.netloc)
        kind = failure_kind(e)
        if kind is None:
            raise
        return send_ns, complete_ns, classify(failure=kind), None, kind, f"{type(e).__name__}: {e}"[:ERROR_BODY_BYTES]
    complete_ns = clock.now()
    outcome = classify(response.status)
    error = None if outcome == ACCEPTED else body[:ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    return send_ns, complete_ns, outcome, response.status, None, error


def _log_progress(counts: dict[str, int], state: dict[str, int], lock: threading.Lock, total: int,
                  due: float) -> None:
    with lock:
        done, in_flight, taken = sum(counts.values()), state["in_flight"], state["next"]
        line = ", ".join(f"{k} {counts[k]}" for k in OUTCOMES)
    # Requests due by now that no worker has taken yet: every worker is busy, the driver is behind.
    behind = max(0, min(math.floor(due), total) - taken)
    log.info("http driver: %d/%d done (%s), %d in flight, %d due but not sent yet", done, total, line, in_flight, behind)


def drive(template: RequestTemplate, run: Mapping[str, str], rate: float, *, messages: int | None = None,
          duration_s: float | None = None, workers: int = DEFAULT_WORKERS, timeout_s: float = 5.0,
          stop: threading.Event | None = None, event_id: Callable[[int], str] | None = None,
          progress_s: float = 5.0) -> pa.Table:
    """Send one request per event at `rate` per second, open loop, and return one `HTTP_SENDS` row per
    request sent, in seq order. `run` holds the template's bootstrap, topic, group, run_id; at least
    one of `messages` (count) and `duration_s` (last intended time) bounds it, the other defaults
    from `rate`. Event ids are `spec.application.event_id(run_id, seq)` (`<run_id>-<seq>`) unless
    `event_id(seq)` says otherwise. `timeout_s` is the socket timeout of each connect and read.
    Progress is logged every `progress_s` seconds.
    ValueError for bad bounds; an exception that is not about the connection is raised after the
    workers stopped."""
    if not rate > 0 or workers < 1 or not timeout_s > 0:
        raise ValueError(f"rate, workers and timeout_s must be positive; got {rate}, {workers}, {timeout_s}")
    if messages is None and duration_s is None:
        raise ValueError("drive needs messages or duration_s (or both): it is always bounded")
    if (messages is not None and messages < 0) or (duration_s is not None and duration_s < 0):
        raise ValueError(f"messages and duration_s must not be negative; got {messages}, {duration_s}")
    total = messages if messages is not None else math.ceil(rate * duration_s)  # type: ignore[operator]
    if duration_s is not None:
        total = min(total, math.ceil(rate * duration_s))  # intended times 0 .. < duration_s
    ids = event_id or (lambda seq: run_event_id(run["run_id"], seq))
    stop = stop or threading.Event()
    halt = threading.Event()  # stop, or a worker's unexpected exception
    clock = _Clock()
    start_mono = time.monotonic_ns() + 10_000_000  # a little ahead, so seq 0 is not already late
    start_ns = start_mono + clock.offset
    period_ns = 1e9 / rate
    rows: list[_Row | None] = [None] * total
    counts = dict.fromkeys(OUTCOMES, 0)
    state = {"next": 0, "in_flight": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        connections = _Connections(timeout_s)
        try:
            while not halt.is_set() and not stop.is_set():
                with lock:
                    seq = state["next"]
                    if seq >= total:
                        return
                    state["next"] += 1
                offset = round(seq * period_ns)
                delay = (start_mono + offset - time.monotonic_ns()) / 1e9
                if delay > 0 and (stop.wait(delay) or halt.is_set()):
                    return
                id = ids(seq)
                with lock:
                    state["in_flight"] += 1
                try:
                    sent = _send_one(template.render(run, id, seq), connections, clock)
                finally:
                    with lock:
                        state["in_flight"] -= 1
                row = _Row(seq, id, worker, start_ns + offset, *sent)
                with lock:
                    rows[seq] = row
                    counts[row.outcome] += 1
        except BaseException as e:  # reported by drive, after every worker stopped
            errors.append(e)
            halt.set()
        finally:
            connections.close()

    threads = [threading.Thread(target=work, args=(w,), name=f"http-driver-{w}", daemon=True)
               for w in range(min(workers, max(total, 1)))]
    log.info("http driver: %d requests at %.6g/s, %d workers, %s %s", total, rate, len(threads),
             template.method, template.url)
    for t in threads:
        t.start()
    last = time.monotonic()
    for t in threads:
        while t.is_alive():
            t.join(max(0.0, last + progress_s - time.monotonic()))
            if time.monotonic() >= last + progress_s:
                last = time.monotonic()
                _log_progress(counts, state, lock, total, (time.monotonic_ns() - start_mono) / 1e9 * rate)
    if errors:
        raise errors[0]
    done_rows = [r for r in rows if r is not None]
    log.info("http driver: finished %d/%d (%s)%s", len(done_rows), total,
             ", ".join(f"{k} {counts[k]}" for k in OUTCOMES), ", stopped early" if stop.is_set() else "")
    return pa.Table.from_pylist([vars(r) for r in done_rows], schema=HTTP_SENDS)

