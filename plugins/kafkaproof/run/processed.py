"""What the application's consumer side processed, as ledger READS rows (issue 39); a run uses it through `run/app_run.py`.

A black-box application exposes what it processed in one of three ways (the scenario's
`application.processed`): an HTTP endpoint listing the processed ids (or records: objects with the
id and, with `records` pointers, the input topic's partition and offset and the processing time), an
output topic, or a PostgreSQL query. Only an HTTP list of records with positions says which offset
of the input topic was processed; every other row has `partition` and `offset` null (the Spark job
then leaves them out of its position and offset checks: `app_ledger.not_applicable` says which
checks cannot be judged, and why). Every row has consumer 0, generation -1, and the value id of its
event by the run's event index (`app_ledger.EventDecoder`; -1, counted, for an id that is not one of
the run's events).

- `ProcessedPoller` polls a source (`http_fetch`, `postgres_fetch`) every `poll_s` in a thread of
  its own, and once more when stopped; each processed record becomes one row at the time it was
  first seen (or at the processing time the source gives).
- `reads_from_topic` reads an output topic with the audit drain, by identity.
"""
from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import pyarrow as pa

from ..errors import ApplicationError
from ..spec.application import MISSING, PROCESSED_MODES, RecordPointers, at_pointer, pointer_tokens
from ..spec.ledger import READS
from .app_ledger import EventDecoder
from .drain import drain

log = logging.getLogger(__name__)

MODES = PROCESSED_MODES
NS_PER_MS = 1_000_000


class Item(NamedTuple):
    """One processed record as a source lists it: its id; its processing time (wall-clock ns), and the
    input topic's partition and offset it was read at, when the source says."""
    id: Any
    processed_ns: int | None = None
    partition: int | None = None
    offset: int | None = None


Fetch = Callable[[], list[Item]]


@dataclass
class PollStats:
    """How polling went, for the report: polls tried, polls that failed (the service down, a bad
    answer) with the last error, and in `log` mode the restarts seen (a list that began anew)."""
    polls: int = 0
    failed: int = 0
    restarts: int = 0
    last_error: str | None = None
    items_last: int = 0

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


@dataclass
class _Seen:
    """What a poller has turned into rows so far."""
    emitted: Counter = field(default_factory=Counter)  # counts/distinct: rows per id
    previous: list = field(default_factory=list)        # log: the last answer
    incarnation: int = 0


def new_items(answer: Sequence[Item], mode: str, seen: _Seen) -> tuple[list[Item], bool]:
    """Pure but for `seen`, which it updates: the records of `answer` not turned into rows yet, and
    whether the source restarted (`log` mode only).

    - `counts`: an id listed n times was processed n times; a durable store, so a count never goes
      down (a lower one is ignored). New rows: the occurrences beyond what was emitted for that id.
    - `log`: the answer is the processing log in order, kept in memory: it grows at its end. An
      answer that does not begin with the previous one means the service restarted with an empty
      log; every record in it is new.
    - `distinct`: one row per id, the first time it is listed."""
    if mode == "log":
        previous, seen.previous = seen.previous, list(answer)
        if [item[0] for item in answer[:len(previous)]] == [item[0] for item in previous]:
            return list(answer[len(previous):]), False
        seen.incarnation += 1
        return list(answer), True
    out: list[Item] = []
    listed: Counter = Counter()
    for item in answer:  # in the answer's order
        key = _key(item[0])
        listed[key] += 1
        if listed[key] > seen.emitted[key] and (mode == "counts" or listed[key] == 1):
            out.append(item)
    for key, n in listed.items():
        seen.emitted[key] = max(seen.emitted[key], n if mode == "counts" else 1)
    return out, False


def _key(event_id: Any) -> Any:
    # Unhashable ids (a JSON object in the list) are kept, by their text, to be counted as unreadable.
    return event_id if isinstance(event_id, (str, int)) else json.dumps(event_id, sort_keys=True, default=str)


def read_row(value_id: int, read_ns: int, poll_id: int, incarnation: int = 0, consumer: int = 0,
             key: str | None = None, partition: int | None = None, offset: int | None = None) -> dict[str, Any]:
    """Pure: one READS row of an application's processed record: the input topic's partition and offset
    when the source gives them, no poll position."""
    return {"consumer": consumer, "consumer_pid": None, "incarnation": incarnation, "generation": -1,
            "partition": partition, "offset": offset, "key": key, "value_id": value_id, "read_ns": read_ns,
            "poll_id": poll_id, "poll_seq": None}


class ProcessedPoller:
    """Polls `fetch` every `poll_s` seconds in a daemon thread (`start`), and a last time in `stop`;
    `table()` is the READS rows so far. A failed poll (the service down during a fault, a bad answer)
    is counted and logged, never fatal. Times: `clock()` (the ledger's, monotonic ns) when the answer
    arrived; a processing time the source gives is wall-clock ns, moved by `clock_offset_ns` (the
    manifest's wall_origin_ns - monotonic_origin_ns)."""

    def __init__(self, fetch: Fetch, decoder: EventDecoder, poll_s: float = 1.0, mode: str = "counts",
                 consumer: int = 0, clock: Callable[[], int] = time.monotonic_ns, clock_offset_ns: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"processed mode {mode!r}; allowed: {', '.join(MODES)}")
        if not poll_s > 0:
            raise ValueError(f"poll_s must be > 0; got {poll_s!r}")
        self.fetch, self.decoder, self.poll_s, self.mode = fetch, decoder, poll_s, mode
        self.consumer, self.clock, self.clock_offset_ns = consumer, clock, clock_offset_ns
        self.stats = PollStats()
        self._seen = _Seen()
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """One poll now: fetch, turn the new records into rows; returns how many rows it added."""
        with self._lock:
            poll_id = self.stats.polls
            self.stats.polls += 1
            try:
                answer = self.fetch()
            except (OSError, http.client.HTTPException, ApplicationError, ValueError) as e:
                self.stats.failed += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                log.info("processed poll %d failed: %s", poll_id, self.stats.last_error)
                return 0
            now = self.clock()
            self.stats.items_last = len(answer)
            items, restarted = new_items(answer, self.mode, self._seen)
            self.stats.restarts += restarted
            for event_id, processed_ns, partition, offset in items:
                read_ns = now if processed_ns is None else processed_ns - self.clock_offset_ns
                self._rows.append(read_row(self.decoder.id_value(event_id), read_ns, poll_id,
                                           self._seen.incarnation if self.mode == "log" else 0, self.consumer,
                                           partition=partition, offset=offset))
            return len(items)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def start(self) -> ProcessedPoller:
        """Poll once now, then every `poll_s` until `stop`."""
        if self._thread is not None:
            raise RuntimeError("processed poller already started")
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="kp-processed-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self, final: bool = True, join_s: float = 30.0) -> None:
        """End the polling thread and (with `final`) poll a last time, so what was processed by the end counts."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(join_s)
        if final:
            self.poll()

    def __enter__(self) -> ProcessedPoller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(final=exc[0] is None)

    def table(self) -> pa.Table:
        """The READS rows so far, in the order they were first seen."""
        with self._lock:
            return pa.Table.from_pylist(list(self._rows), schema=READS)


def list_at(answer: Any, pointer: str, where: str) -> list[Any]:
    """Pure: the list at an RFC 6901 `pointer` of a parsed JSON answer; ApplicationError naming `where`
    when the pointer does not lead to a list."""
    node = at_pointer(answer, pointer_tokens(pointer))
    if node is MISSING:
        raise ApplicationError(f"{where}: the answer has nothing at {pointer!r}")
    if not isinstance(node, list):
        raise ApplicationError(f"{where}: expected a list of ids at {pointer or 'the top'!r}, got {type(node).__name__}")
    return node


def _position(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def record_items(listed: Sequence[Any], records: RecordPointers, topic: str | None = None,
                 where: str = "processed records") -> list[Item]:
    """Pure: the processed records of a list of objects, each field read by its pointer in `records`.

    An object without an id at `records.id` gives the object itself as the id (not a string: the decoder
    counts it unreadable and shows it), anything but an object None. A record has a position only when
    it has an id, both its partition and offset are integers >= 0 and, with `records.topic`, its topic is
    `topic` (the run's input topic); otherwise both are None (an unidentified read at an offset would
    look like another value there). A processing time at `records.time_ms` is epoch
    milliseconds (null or absent: none); ValueError naming `where` and the pointer for anything else."""
    tokens = {name: pointer_tokens(pointer) for name, pointer in records.as_dict().items()}
    items: list[Item] = []
    for element in listed:
        def at(name: str) -> Any:
            found = at_pointer(element, tokens[name]) if name in tokens else MISSING
            return None if found is MISSING else found
        event_id = at("id")
        partition, offset = _position(at("partition")), _position(at("offset"))
        if (event_id is None or partition is None or offset is None
                or (records.topic is not None and at("topic") != topic)):
            partition = offset = None
        if event_id is None and isinstance(element, dict):
            event_id = element
        try:
            processed_ns = wall_ns(at("time_ms"))
        except ValueError as e:
            raise ValueError(f"{where}: {records.time_ms}: {e}") from None
        items.append(Item(event_id, processed_ns, partition, offset))
    return items


def http_fetch(url: str, pointer: str = "", timeout_s: float = 5.0, records: RecordPointers | None = None,
               topic: str | None = None) -> Fetch:
    """A fetch for `ProcessedPoller`: GET `url`, the JSON answer's list of processed ids (at `pointer`;
    "" is the answer itself) or, with `records`, of processed records (`record_items`, with the run's
    input `topic`). ApplicationError for a non-2xx answer, one that is not JSON or has no list there;
    ValueError for a processing time that is not epoch milliseconds (a failed poll)."""
    pointer_tokens(pointer)  # a bad pointer is refused now, not at every poll
    if records is not None and records.topic is not None and topic is None:
        raise ValueError("records with a topic pointer need the run's topic to compare with")

    def fetch() -> list[Item]:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                body = answer.read()
        except urllib.error.HTTPError as e:
            raise ApplicationError(f"GET {url}: HTTP {e.code}") from None
        try:
            parsed = json.loads(body)
        except ValueError:
            raise ApplicationError(f"GET {url}: the answer is not JSON: {body[:80]!r}") from None
        listed = list_at(parsed, pointer, f"GET {url}")
        return [Item(i) for i in listed] if records is None else record_items(listed, records, topic, f"GET {url}")
    return fetch


def wall_ns(value: Any) -> int | None:
    """Pure: a processing time as wall-clock ns: a datetime (naive read as UTC) or epoch milliseconds;
    None for null. ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return int(aware.timestamp() * 1e6) * 1000
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * NS_PER_MS)
    raise ValueError(f"a processing time must be a timestamp or epoch milliseconds; got {value!r}")


def rows_to_items(rows: Sequence[Sequence[Any]], where: str) -> list[Item]:
    """Pure: a query's rows as processed records: the id in the first column, a processing time in
    an optional second (`wall_ns`). ApplicationError naming `where` for a row of any other width."""
    items: list[Item] = []
    for row in rows:
        if len(row) not in (1, 2):
            raise ApplicationError(f"{where}: a row has {len(row)} columns; the query returns the id and "
                                 "optionally the processing time")
        items.append(Item(row[0], wall_ns(row[1]) if len(row) == 2 else None))
    return items


def postgres_fetch(dsn: str, query: str, timeout_s: float = 5.0) -> Fetch:
    """A fetch for `ProcessedPoller` on PostgreSQL (psycopg2): runs `query` on a new connection each
    poll (a database restarted by a fault is just a failed poll). The query returns one row per
    processing: the id, and optionally the processing time (timestamptz, or epoch milliseconds);
    use the poller's `counts` mode (a table does not forget)."""
    import psycopg2  # the `postgres` extra: only a run with a PostgreSQL source needs it

    def fetch() -> list[Item]:
        try:
            conn = psycopg2.connect(dsn, connect_timeout=max(1, int(timeout_s)),
                                    options=f"-c statement_timeout={int(timeout_s * 1000)}")
        except psycopg2.Error as e:
            raise ApplicationError(f"postgres: cannot connect: {str(e).strip()}") from None
        try:
            with conn.cursor() as cursor:
                cursor.execute(query)
                return rows_to_items(cursor.fetchall(), "postgres query")
        except psycopg2.Error as e:
            raise ApplicationError(f"postgres query failed: {str(e).strip()}") from None
        finally:
            conn.close()
    return fetch


def reads_from_records(records: Sequence[Mapping[str, Any]], clock_offset_ns: int = 0,
                       consumer: int = 0) -> pa.Table:
    """Pure: READS rows of an output topic's drained records (drain rows: partition, offset, key,
    value_id, timestamp_ms): read_ns is the record's timestamp (when the application wrote it) on the
    ledger's clock, null without one; the output topic's own partition and offset are left out
    (they are not positions of the input topic)."""
    rows = [read_row(r["value_id"], r["timestamp_ms"] * NS_PER_MS - clock_offset_ns
                     if r.get("timestamp_ms") is not None and r["timestamp_ms"] >= 0 else None,
                     0, consumer=consumer, key=r.get("key"))
            for r in records]
    return pa.Table.from_pylist(rows, schema=READS)


def reads_from_topic(bootstrap: str, topic: str, decoder: EventDecoder, timeout_s: float = 60.0,
                     connection: Mapping[str, Any] | None = None,
                     clock_offset_ns: int = 0) -> tuple[pa.Table, dict[int, dict]]:
    """READS rows of what the application wrote to its output `topic`, read with the audit drain
    (read_committed) by identity; also the drain's watermarks per partition (`complete` says whether
    it read them all)."""
    records, marks = drain(bootstrap, topic, "read_committed", timeout_s, connection, decoder=decoder)
    return reads_from_records(records, clock_offset_ns), marks
