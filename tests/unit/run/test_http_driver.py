"""The open-loop HTTP driver against a real local HTTP server (127.0.0.1, a free port)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

import pytest

from kafkaproof.run.http_driver import ERROR_BODY_BYTES, HTTP_SENDS, drive
from kafkaproof.spec.application import parse_request

pytestmark = pytest.mark.unit

RUN = {"bootstrap": "127.0.0.1:9092", "topic": "signups", "group": "g", "run_id": "r7"}
# answer(path, body) -> (status, body, seconds to sleep before answering)
Answer = Callable[[str, bytes], tuple[int, bytes, float]]


def ok(path: str, body: bytes) -> tuple[int, bytes, float]:
    return 200, b"ok", 0.0


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the driver's workers connect at once; the default 5 drops SYNs (1 s retries)


@pytest.fixture
def server() -> Iterator[Callable[[Answer], tuple[str, list]]]:
    """Start a keep-alive ThreadingHTTPServer answering with `answer`; gives its base URL and the
    (path, body, arrival monotonic s) of every request it received."""
    started: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> tuple[str, list]:
        seen: list = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else the reply's two writes wait on delayed ACKs

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                seen.append((self.path, body, time.monotonic()))
                status, reply, sleep = answer(self.path, body)
                if sleep:
                    time.sleep(sleep)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: object) -> None:
                pass

        srv = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", seen

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def template(base: str):
    return parse_request({"url": base + "/signups/{id}", "headers": {"Content-Type": "application/json"},
                          "body": '{"id": "{id}", "seq": {seq}, "topic": "{topic}"}'}, "app.request")


def test_every_request_accepted_with_exact_ids_seqs_and_rendered_bodies(server):
    base, seen = server(ok)
    table = drive(template(base), RUN, rate=200, messages=100, workers=8)
    assert table.schema == HTTP_SENDS
    rows = table.to_pylist()
    assert [r["seq"] for r in rows] == list(range(100))
    assert [r["event_id"] for r in rows] == [f"r7-{i}" for i in range(100)]
    assert {r["outcome"] for r in rows} == {"accepted"} and {r["status"] for r in rows} == {200}
    assert all(r["error_message"] is None and r["failure"] is None for r in rows)
    assert all(r["intended_ns"] <= r["send_ns"] + 2_000_000 and r["send_ns"] <= r["complete_ns"] for r in rows)
    intended = [r["intended_ns"] for r in rows]
    assert [b - a for a, b in zip(intended, intended[1:])] == pytest.approx([5_000_000] * 99, abs=1)
    bodies = sorted((json.loads(body) for _, body, _ in seen), key=lambda b: b["seq"])
    assert bodies == [{"id": f"r7-{i}", "seq": i, "topic": "signups"} for i in range(100)]
    assert sorted(path for path, _, _ in seen) == sorted(f"/signups/r7-{i}" for i in range(100))


def test_a_503_is_rejected_with_its_status_and_body_prefix(server):
    long = b"overloaded " + b"x" * 500

    def answer(path: str, body: bytes) -> tuple[int, bytes, float]:
        return (503, long, 0.0) if path.endswith(("-3", "-7")) else (200, b"ok", 0.0)
    base, _ = server(answer)
    rows = drive(template(base), RUN, rate=500, messages=10, workers=4).to_pylist()
    rejected = [r for r in rows if r["outcome"] == "rejected"]
    assert [r["seq"] for r in rejected] == [3, 7]
    assert all(r["status"] == 503 and r["error_message"] == long[:ERROR_BODY_BYTES].decode() for r in rejected)
    assert len(rejected[0]["error_message"]) == ERROR_BODY_BYTES
    assert sum(r["outcome"] == "accepted" for r in rows) == 8


def test_an_answer_slower_than_the_timeout_is_indefinite(server):
    base, _ = server(lambda path, body: (200, b"late", 0.6) if path.endswith("-1") else (200, b"ok", 0.0))
    rows = drive(template(base), RUN, rate=100, messages=3, workers=3, timeout_s=0.2).to_pylist()
    assert [r["outcome"] for r in rows] == ["accepted", "indefinite", "accepted"]
    assert rows[1]["failure"] == "timeout" and rows[1]["status"] is None and "timed out" in rows[1]["error_message"]
    assert rows[1]["complete_ns"] - rows[1]["send_ns"] >= 150_000_000


def test_a_closed_port_is_refused_and_so_rejected():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows = drive(template(f"http://127.0.0.1:{port}"), RUN, rate=100, messages=3, workers=2).to_pylist()
    assert [(r["outcome"], r["failure"], r["status"]) for r in rows] == [("rejected", "refused", None)] * 3
    assert all(r["error_message"].startswith("ConnectionRefusedError") for r in rows)


def test_open_loop_a_stalled_request_does_not_delay_later_intended_times(server):
    base, seen = server(lambda path, body: (200, b"slow", 0.5) if path.endswith("-5") else (200, b"ok", 0.0))
    rows = drive(template(base), RUN, rate=100, messages=40, workers=4).to_pylist()
    assert {r["outcome"] for r in rows} == {"accepted"} and len(rows) == 40
    start = rows[0]["intended_ns"]
    assert [r["intended_ns"] - start for r in rows] == pytest.approx([i * 10_000_000 for i in range(40)], abs=1)
    assert rows[5]["complete_ns"] - rows[5]["intended_ns"] >= 450_000_000
    # the other workers kept sending on schedule while one waited
    later = [r for r in rows if r["seq"] > 5]
    assert max(r["send_ns"] - r["intended_ns"] for r in later) < 200_000_000
    assert max(r["complete_ns"] for r in later) < rows[5]["complete_ns"]


def test_bounded_by_messages_by_duration_and_by_stop(server):
    base, seen = server(ok)
    assert drive(template(base), RUN, rate=1000, messages=7, duration_s=10).num_rows == 7
    began = time.monotonic()
    table = drive(template(base), RUN, rate=100, duration_s=0.3, messages=1000)
    assert table.num_rows == 30 and time.monotonic() - began < 1.0
    assert table.column("seq").to_pylist() == list(range(30))
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    began = time.monotonic()
    stopped = drive(template(base), RUN, rate=100, messages=1000, stop=stop).to_pylist()
    assert time.monotonic() - began < 0.6 and 10 <= len(stopped) <= 30
    assert [r["seq"] for r in stopped] == list(range(len(stopped)))
    with pytest.raises(ValueError, match="messages or duration_s"):
        drive(template(base), RUN, rate=100)


def test_custom_event_ids(server):
    base, seen = server(ok)
    rows = drive(template(base), RUN, rate=500, messages=3, event_id=lambda seq: f"e{seq:03d}").to_pylist()
    assert [r["event_id"] for r in rows] == ["e000", "e001", "e002"]
    assert sorted(p for p, _, _ in seen) == ["/signups/e000", "/signups/e001", "/signups/e002"]


def test_progress_is_logged_while_it_runs(server, caplog):
    base, _ = server(ok)
    with caplog.at_level("INFO", logger="kafkaproof.run.http_driver"):
        drive(template(base), RUN, rate=100, messages=30, progress_s=0.1)
    progress = [r.getMessage() for r in caplog.records if "in flight" in r.getMessage()]
    assert len(progress) >= 2 and all("done (accepted" in line for line in progress)
    assert caplog.records[-1].getMessage().startswith("http driver: finished 30/30 (accepted 30, rejected 0")
