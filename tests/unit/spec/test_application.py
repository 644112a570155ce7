"""Building blocks of the application under test (issue 39): identity readers, outcomes, request templates."""
from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from kafkaproof.errors import KafkaproofError, ScenarioError
from kafkaproof.spec.application import (ACCEPTED, INDEFINITE, REJECTED, Identity, classify, failure_kind,
                                         event_id, event_seq, fill_placeholders, parse_identity, parse_request)

pytestmark = pytest.mark.unit

WHERE = "app.yaml: application.identity"
RUN = {"bootstrap": "127.0.0.1:9092", "topic": "signups", "group": "g1", "run_id": "r42"}


def ident(**section) -> Identity:
    return parse_identity(section, WHERE)


@pytest.mark.parametrize("pointer, value, expected", [
    ("/id", b'{"id": "e-1", "n": 2}', "e-1"),
    ("/event/id", b'{"event": {"id": "e-2"}}', "e-2"),
    ("/items/1/id", b'{"items": [{"id": "a"}, {"id": "b"}]}', "b"),
    ("/a~1b", b'{"a/b": "slash"}', "slash"),
    ("/m~0n", b'{"m~n": "tilde"}', "tilde"),
    ("/~01", b'{"~1": "tilde-one"}', "tilde-one"),
    ("/seq", b'{"seq": 17}', "17"),
    ("", b'"whole"', "whole"),
    ("/id", "{\"id\": \"s\u00e9b\"}".encode(), "s\u00e9b"),
])
def test_a_json_pointer_reads_the_id_from_the_record_value(pointer, value, expected):
    assert ident(json_pointer=pointer).read(b"k", value, [("h", b"v")]) == expected


@pytest.mark.parametrize("value", [
    b'{"id": "e-1"',                  # malformed JSON
    b'{"other": "x"}',                # pointer missing
    b'{"id": {"nested": 1}}',         # not a scalar
    b'{"id": true}', b'{"id": null}', b'{"id": ""}', b'{"id": 1.5}',
    b'\xff\xfe{"id": "x"}',           # not UTF-8
    None,                              # tombstone
    b"plain text",
])
def test_a_record_whose_pointer_cannot_be_read_gives_none(value):
    assert ident(json_pointer="/id").read(None, value, None) is None


@pytest.mark.parametrize("pointer", ["/items/2/id", "/items/-/id", "/items/01/id", "/items/x/id"])
def test_array_indexes_out_of_range_or_not_decimal_give_none(pointer):
    assert ident(json_pointer=pointer).read(None, b'{"items": [{"id": "a"}, {"id": "b"}]}', None) is None


def test_a_header_identity_reads_the_first_header_of_that_name():
    identity = ident(header="event-id")
    assert identity.read(b"k", b"{}", [("trace", b"t"), ("event-id", b"e-9"), ("event-id", b"e-10")]) == "e-9"
    assert identity.read(b"k", b"{}", [("trace", b"t")]) is None
    assert identity.read(b"k", b"{}", None) is None
    assert identity.read(b"k", b"{}", [("event-id", b"\xff")]) is None
    assert identity.read(b"k", b"{}", [("event-id", None)]) is None


def test_a_key_identity_reads_the_record_key():
    identity = ident(key=True)
    assert identity.read(b"user-7", b"x", None) == "user-7"
    assert identity.read(None, b"x", None) is None
    assert identity.read(b"\xc3\x28", b"x", None) is None


def test_a_regex_identity_reads_its_one_group_from_the_value():
    identity = ident(regex=r"signup id=(\w+)")
    assert identity.read(None, b"2026-11-26 signup id=e42 ok", None) == "e42"
    assert identity.read(None, b"login id=e42", None) is None
    assert identity.read(None, b"\xffsignup id=e42", None) is None
    assert identity.read(None, None, None) is None
    assert ident(regex=r"(?:a|b)=(\d+)|none").read(None, b"none", None) is None  # group did not take part


@pytest.mark.parametrize("section, names", [
    ({}, ["application.identity", "exactly one of json_pointer, header, key, regex"]),
    ({"key": True, "header": "h"}, ["exactly one of"]),
    ("/id", ["must be a mapping"]),
    ({"jsonpath": "$.id"}, ["application.identity.jsonpath", "allowed: json_pointer, header, key, regex"]),
    ({"key": "yes"}, ["application.identity.key", "must be true"]),
    ({"header": ""}, ["application.identity.header", "non-empty string"]),
    ({"json_pointer": 3}, ["application.identity.json_pointer", "string"]),
    ({"json_pointer": "id"}, ["application.identity.json_pointer", "starts with '/'"]),
    ({"json_pointer": "/a~2"}, ["application.identity.json_pointer", "~0"]),
    ({"regex": "id=("}, ["application.identity.regex", "not a regular expression"]),
    ({"regex": r"id=\w+"}, ["application.identity.regex", "0 groups", "exactly one"]),
    ({"regex": r"(\w+)=(\w+)"}, ["application.identity.regex", "2 groups"]),
])
def test_a_bad_identity_section_is_refused_naming_the_field(section, names):
    with pytest.raises(ScenarioError) as e:
        parse_identity(section, WHERE)
    assert isinstance(e.value, KafkaproofError)
    for name in names:
        assert name in str(e.value)


@pytest.mark.parametrize("status, outcome", [(200, ACCEPTED), (201, ACCEPTED), (204, ACCEPTED), (299, ACCEPTED),
                                             (400, REJECTED), (409, REJECTED), (500, REJECTED), (503, REJECTED),
                                             (302, REJECTED), (199, REJECTED)])
def test_a_status_classifies_the_request(status, outcome):
    assert classify(status) == outcome


def test_failures_classify_by_whether_the_request_may_have_been_taken():
    assert classify(failure="timeout") == INDEFINITE
    assert classify(failure="reset") == INDEFINITE
    assert classify(failure="refused") == REJECTED
    for bad in ({}, {"status": 200, "failure": "timeout"}, {"status": 99}, {"status": True}, {"failure": "dns"}):
        with pytest.raises(ValueError):
            classify(**bad)


def test_exceptions_map_to_failure_kinds():
    assert failure_kind(TimeoutError()) == "timeout"
    assert failure_kind(socket.timeout()) == "timeout"
    assert failure_kind(ConnectionRefusedError()) == "refused"
    assert failure_kind(ConnectionResetError()) == "reset"
    assert failure_kind(BrokenPipeError()) == "reset"
    assert failure_kind(urllib.error.URLError(ConnectionRefusedError())) == "refused"
    assert failure_kind(urllib.error.URLError(TimeoutError())) == "timeout"
    assert failure_kind(ValueError("bug")) is None


def test_a_request_template_renders_event_and_run_values():
    template = parse_request({"url": "http://127.0.0.1:8080/{topic}/signups?n={seq}",
                              "headers": {"X-Event": "{id}", "X-Run": "{run_id}/{group}"},
                              "body": '{"id": "{id}", "seq": {seq}, "kafka": "{bootstrap}"}'}, "app.yaml: request")
    request = template.render(RUN, "e-7", 7)
    assert request.method == "POST"
    assert request.url == "http://127.0.0.1:8080/signups/signups?n=7"
    assert request.headers == {"X-Event": "e-7", "X-Run": "r42/g1"}
    assert request.body_bytes == b'{"id": "e-7", "seq": 7, "kafka": "127.0.0.1:9092"}'
    assert parse_request({"url": "http://h/x", "method": "put"}, "w").render(RUN, "a", 1).body_bytes == b""
    assert parse_request({"url": "http://h/x", "method": "put"}, "w").method == "PUT"


def test_event_ids_of_a_run_and_their_inverse():
    assert event_id("r42", 7) == "r42-7"
    assert [event_seq("r42", event_id("r42", seq)) for seq in (0, 7, 10**9)] == [0, 7, 10**9]
    # Not an id this run's driver gives: another run's (even one whose id starts like this one), not
    # decimal, not the canonical form.
    for other in ("r4-7", "r42-", "r42-x", "r42-07", "r42--1", "r42-\u00b2", "r42-7 ", "r42-1-2"):
        assert event_seq("r42", other) is None, other
    assert event_seq("r42-1", "r42-1-2") == 2


def test_only_known_placeholders_are_substituted():
    assert fill_placeholders('{"a": 1} {port} {other} ${port}', {"port": "8080"}) == '{"a": 1} 8080 {other} $8080'


@pytest.mark.parametrize("section, names", [
    ({"url": "http://h/{idd}"}, ["request.url", "unknown placeholder {idd}", "{id}, {seq}, {bootstrap}"]),
    ({"url": "http://h/", "body": '{"x": "{event_id}"}'}, ["request.body", "{event_id}"]),
    ({"url": "http://h/", "headers": {"X-Id": "{ID}"}}, ["request.headers.X-Id", "{ID}"]),
    ({"url": "http://h/", "headers": {"X-Id": 3}}, ["request.headers.X-Id", "must be a string"]),
    ({"url": "http://h/", "headers": ["X-Id"]}, ["request.headers", "mapping"]),
    ({"body": "x"}, ["request.url", "required"]),
    ({"url": "ftp://h/"}, ["request.url", "http://"]),
    ({"url": "http://h/", "method": "TRACE"}, ["request.method", "allowed: POST"]),
    ({"url": "http://h/", "timeout": 3}, ["request.timeout", "allowed: url, method, headers, body"]),
    ("http://h/", ["request", "mapping"]),
])
def test_a_bad_request_section_is_refused_naming_the_field(section, names):
    with pytest.raises(ScenarioError) as e:
        parse_request(section, "app.yaml: request")
    for name in names:
        assert name in str(e.value)


class _App(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/slow":
            time.sleep(1.0)
        status = 503 if self.path == "/busy" else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _outcome(request) -> str:
    http_request = urllib.request.Request(request.url, data=request.body_bytes, headers=request.headers,
                                          method=request.method)
    try:
        with urllib.request.urlopen(http_request, timeout=0.3) as answer:
            return classify(answer.status)
    except urllib.error.HTTPError as e:
        return classify(e.code)
    except OSError as e:
        return classify(failure=failure_kind(e))


def test_outcomes_against_a_real_local_http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _App)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    closed_port = free.getsockname()[1]
    free.close()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        outcomes = {path: _outcome(parse_request({"url": base + path, "body": '{"id": "{id}"}'}, "w")
                                   .render(RUN, "e-1", 1)) for path in ("/ok", "/busy", "/slow")}
        refused = _outcome(parse_request({"url": f"http://127.0.0.1:{closed_port}/x"}, "w").render(RUN, "e-2", 2))
    finally:
        server.shutdown()
        server.server_close()
    assert outcomes == {"/ok": ACCEPTED, "/busy": REJECTED, "/slow": INDEFINITE}
    assert refused == REJECTED
