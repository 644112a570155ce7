"""What the application processed as READS rows: the list poller against a real local HTTP server
(answers change between polls), its modes, query rows and output-topic records."""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pyarrow as pa
import pytest

from kafkaproof.errors import ApplicationError
from kafkaproof.run.app_ledger import value_id_of
from kafkaproof.run.processed import (
    Item,
    ProcessedPoller,
    _Seen,
    http_fetch,
    list_at,
    new_items,
    reads_from_records,
    record_items,
    rows_to_items,
    wall_ns,
)
from kafkaproof.spec.application import RecordPointers, parse_identity
from kafkaproof.spec.ledger import READS

pytestmark = pytest.mark.unit

INDEX = {f"e-{i}": 100 + i for i in range(10)}


def decoder():
    return value_id_of(parse_identity({"key": True}, "t"), INDEX)


class Endpoint:
    """A real HTTP server on 127.0.0.1 whose GET answer is `self.answer` (status, JSON-able body), changed by the test."""

    def __init__(self) -> None:
        self.answer: tuple[int, object] = (200, [])
        self.gets = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.gets += 1
                status, body = endpoint.answer
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/processed"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


class Clock:
    def __init__(self) -> None:
        self.t = 1000

    def __call__(self) -> int:
        self.t += 1000
        return self.t


def test_polls_record_first_seen_times_and_repeats_as_counts(endpoint):
    clock = Clock()
    poller = ProcessedPoller(http_fetch(endpoint.url), decoder(), clock=clock)
    endpoint.answer = (200, ["e-0", "e-1"])
    assert poller.poll() == 2
    endpoint.answer = (200, ["e-0", "e-1", "e-2", "e-0"])  # e-0 processed again, e-2 new
    assert poller.poll() == 2
    endpoint.answer = (200, ["e-1", "e-0", "e-0", "e-2", "other"])  # reordered: nothing new but a foreign id
    assert poller.poll() == 1
    rows = poller.table().to_pylist()
    assert poller.table().schema == READS
    assert [(r["value_id"], r["read_ns"], r["poll_id"]) for r in rows] == [
        (100, 2000, 0), (101, 2000, 0), (102, 3000, 1), (100, 3000, 1), (-1, 4000, 2)]
    assert {(r["consumer"], r["partition"], r["offset"], r["generation"], r["poll_seq"]) for r in rows} == \
        {(0, None, None, -1, None)}
    assert poller.decoder.counts.foreign == 1 and poller.stats.polls == 3 and poller.stats.failed == 0


def test_a_processing_log_that_restarts_counts_everything_in_it_again(endpoint):
    poller = ProcessedPoller(http_fetch(endpoint.url), decoder(), mode="log", clock=Clock())
    for answer in (["e-0"], ["e-0", "e-1", "e-0"], [], ["e-1"], ["e-1", "e-2"]):
        endpoint.answer = (200, answer)
        poller.poll()
    rows = poller.table().to_pylist()
    # After the restart (the empty answer) e-1 is processed again by the new incarnation.
    assert [(r["value_id"], r["incarnation"], r["poll_id"]) for r in rows] == [
        (100, 0, 0), (101, 0, 1), (100, 0, 1), (101, 1, 3), (102, 1, 4)]
    assert poller.stats.restarts == 1


def test_failed_polls_are_counted_and_polling_goes_on(endpoint):
    poller = ProcessedPoller(http_fetch(endpoint.url, pointer="/ids"), decoder(), clock=Clock())
    endpoint.answer = (503, {"status": "DOWN"})
    assert poller.poll() == 0
    endpoint.answer = (200, b"<html>")
    assert poller.poll() == 0
    endpoint.answer = (200, {"ids": "e-1"})
    assert poller.poll() == 0
    endpoint.answer = (200, {"ids": ["e-1", 3, None]})
    assert poller.poll() == 3
    assert (poller.stats.polls, poller.stats.failed) == (4, 3)
    assert "expected a list of ids at '/ids', got str" in poller.stats.last_error
    assert [r["value_id"] for r in poller.table().to_pylist()] == [101, -1, -1]
    assert (poller.decoder.counts.foreign, poller.decoder.counts.unreadable) == (1, 1)


def test_a_service_that_is_down_is_a_failed_poll():
    poller = ProcessedPoller(http_fetch("http://127.0.0.1:9/processed", timeout_s=1), decoder())
    assert poller.poll() == 0 and poller.stats.failed == 1
    assert "Error" in poller.stats.last_error


def test_the_thread_polls_every_poll_s_and_once_more_at_the_end(endpoint):
    endpoint.answer = (200, ["e-0"])
    with ProcessedPoller(http_fetch(endpoint.url), decoder(), poll_s=0.05) as poller:
        deadline = time.monotonic() + 10
        while endpoint.gets < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        endpoint.answer = (200, ["e-0", "e-1"])
        polls = poller.stats.polls
    # stop() ran the final poll: e-1, listed only at the end, is there.
    assert poller.stats.polls >= polls + 1 >= 5
    assert not poller._thread.is_alive()
    rows = poller.table().to_pylist()
    assert [r["value_id"] for r in rows] == [100, 101]
    assert rows[1]["read_ns"] > rows[0]["read_ns"]


def test_distinct_mode_keeps_one_row_per_id():
    seen = _Seen()
    assert new_items([("a", None), ("a", None), ("b", None)], "distinct", seen) == ([("a", None), ("b", None)], False)
    assert new_items([("a", None), ("b", None), ("c", None)], "distinct", seen) == ([("c", None)], False)


def test_a_count_that_goes_down_is_ignored():
    seen = _Seen()
    new_items([("a", 1), ("a", 2)], "counts", seen)
    assert new_items([("a", 1)], "counts", seen) == ([], False)
    assert new_items([("a", 1), ("a", 2), ("a", 3)], "counts", seen) == ([("a", 3)], False)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="allowed: counts, log, distinct"):
        ProcessedPoller(lambda: [], decoder(), mode="set")
    with pytest.raises(ValueError, match="JSON pointer"):
        http_fetch("http://127.0.0.1:1/", pointer="ids")
    with pytest.raises(ApplicationError, match="nothing at '/a/1'"):
        list_at({"a": [1]}, "/a/1", "GET x")
    assert list_at({"a": [[5, 6]]}, "/a/0", "GET x") == [5, 6]


def test_query_rows_with_processing_times_move_to_the_ledger_clock():
    when = datetime(2026, 11, 26, 20, 0, tzinfo=timezone.utc)
    items = rows_to_items([("e-0", when), ("e-1", 1_790_000_000_123), ("e-2",)], "q")
    assert items == [Item("e-0", int(when.timestamp()) * 10**9), Item("e-1", 1_790_000_000_123 * 10**6), Item("e-2")]
    assert wall_ns(when.replace(tzinfo=None)) == items[0][1]  # naive: UTC
    with pytest.raises(ApplicationError, match="a row has 3 columns"):
        rows_to_items([("e-0", None, 1)], "q")
    with pytest.raises(ValueError, match="epoch milliseconds"):
        wall_ns("yesterday")
    poller = ProcessedPoller(lambda: items, decoder(), clock=Clock(), clock_offset_ns=10**18)
    poller.poll()
    assert [r["read_ns"] for r in poller.table().to_pylist()] == [
        items[0][1] - 10**18, items[1][1] - 10**18, 2000]


def test_output_topic_records_become_reads_without_input_positions():
    records = [{"isolation": "read_committed", "partition": 2, "offset": 7, "key": "e-1", "value_id": 101,
                "timestamp_ms": 1_790_000_000_000},
               {"isolation": "read_committed", "partition": 0, "offset": 0, "key": None, "value_id": -1,
                "timestamp_ms": -1}]
    table = reads_from_records(records, clock_offset_ns=1_000)
    assert table.schema == READS
    assert table.to_pylist() == [
        {"consumer": 0, "consumer_pid": None, "incarnation": 0, "generation": -1, "partition": None, "offset": None,
         "key": "e-1", "value_id": 101, "read_ns": 1_790_000_000_000 * 10**6 - 1_000, "poll_id": 0, "poll_seq": None},
        {"consumer": 0, "consumer_pid": None, "incarnation": 0, "generation": -1, "partition": None, "offset": None,
         "key": None, "value_id": -1, "read_ns": None, "poll_id": 0, "poll_seq": None}]
    assert isinstance(table, pa.Table)


# signup-processor's GET /processed/records: Jackson's form of ProcessedStore.Processed.
EXAMPLE_RECORDS = RecordPointers(id="/id", partition="/partition", offset="/offset", topic="/topic",
                                 time_ms="/processedAtMs")


def processed(id: object, offset: int, topic: str = "signups", partition: int = 0) -> dict:
    return {"id": id, "topic": topic, "partition": partition, "offset": offset,
            "processedAtMs": 1_790_000_000_000 + offset}


def test_records_listed_with_positions_become_reads_at_those_offsets(endpoint):
    poller = ProcessedPoller(http_fetch(endpoint.url, records=EXAMPLE_RECORDS, topic="signups"), decoder(),
                             clock=Clock(), clock_offset_ns=10**18)
    endpoint.answer = (200, [processed("e-0", 0), processed("e-1", 1)])
    assert poller.poll() == 2
    endpoint.answer = (200, [processed("e-0", 0), processed("e-1", 1), processed("e-1", 1), processed("e-2", 2)])
    assert poller.poll() == 2  # e-1 processed again at the same offset: a redelivery the job can now count
    rows = poller.table().to_pylist()
    assert [(r["value_id"], r["partition"], r["offset"], r["poll_id"]) for r in rows] == [
        (100, 0, 0, 0), (101, 0, 1, 0), (101, 0, 1, 1), (102, 0, 2, 1)]
    assert rows[3]["read_ns"] == (1_790_000_000_000 + 2) * 10**6 - 10**18  # the processing time, on the ledger clock
    assert poller.decoder.counts.matched == 4


def test_a_record_without_a_usable_position_keeps_its_id_without_one():
    listed = [processed("e-0", 5, topic="signups.DLT"),  # another topic's offset: no position in the run's
              {**processed("e-1", 0), "offset": -1}, {**processed("e-2", 0), "partition": True},
              {"topic": "signups", "partition": 0, "offset": 3},  # no id: the object, counted as unreadable
              "e-4", {**processed("e-5", 7), "processedAtMs": None}]
    items = record_items(listed, EXAMPLE_RECORDS, "signups")
    assert [(i.partition, i.offset) for i in items] == [(None, None)] * 5 + [(0, 7)]
    assert [i.id for i in items] == ["e-0", "e-1", "e-2", listed[3], None, "e-5"]
    assert items[5].processed_ns is None
    # Without a topic pointer every position is taken as the input topic's; without positions, ids only.
    assert record_items(listed[:1], RecordPointers(id="/id", partition="/partition", offset="/offset"))[0].offset == 5
    assert record_items([{"event": {"id": "e-1"}}], RecordPointers(id="/event/id")) == [Item("e-1")]
    with pytest.raises(ValueError, match=r"GET x: /processedAtMs: .*epoch milliseconds; got 'today'"):
        record_items([{**processed("e-0", 0), "processedAtMs": "today"}], EXAMPLE_RECORDS, "signups", "GET x")
    with pytest.raises(ValueError, match="need the run's topic"):
        http_fetch("http://127.0.0.1:1/", records=EXAMPLE_RECORDS)
