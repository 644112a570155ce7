"""The application side of a run (run/app_run.py): its pure parts. The run itself, with real services,
Kafka and HTTP, is tests/cluster/test_app_scenarios.py."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kafkaproof.errors import ApplicationError
from kafkaproof.run.app_run import AppRun, PollingFleet, identity_error, rejected_before, resolve_example_app
from kafkaproof.run.http_driver import HTTP_SENDS
from kafkaproof.spec.application import parse_application
from kafkaproof.spec.ledger import READS, make_value_id

pytestmark = pytest.mark.unit


def sends(rows: list[tuple[int, str, int | None, str | None]]) -> pa.Table:
    """HTTP_SENDS rows from (intended_ns, outcome, status, failure)."""
    return pa.Table.from_pylist([
        {"seq": i, "event_id": f"r-{i}", "worker": 0, "intended_ns": t, "send_ns": t, "complete_ns": t + 1,
         "outcome": o, "status": s, "failure": f, "error_message": "no such route" if s else None}
        for i, (t, o, s, f) in enumerate(rows)], schema=HTTP_SENDS)


def test_example_app_placeholders_become_the_built_jars():
    built = []

    def build():
        built.append(1)
        return {"signup-service": Path("/cache/x/signup-service.jar")}
    assert resolve_example_app(("java", "-jar", "{example_app:signup-service}", "--p={port}"), build) == \
        ["java", "-jar", "/cache/x/signup-service.jar", "--p={port}"]
    assert resolve_example_app(("java", "-jar", "app.jar"), build) == ["java", "-jar", "app.jar"]
    assert len(built) == 1  # built only when asked for
    with pytest.raises(ApplicationError, match=r"\{example_app:billing\}.*no service 'billing'.*signup-service"):
        resolve_example_app(("{example_app:billing}",), build)


def test_every_request_rejected_before_the_first_fault_is_an_error():
    assert rejected_before(sends([(1, "rejected", 404, None), (2, "rejected", 404, None), (9, "accepted", 200, None)]),
                           5) == (2, "HTTP 404: no such route")
    assert rejected_before(sends([(1, "rejected", None, "refused")]), None) == (1, "refused")
    # one accepted (or indefinite) before the fault: the requests work
    assert rejected_before(sends([(1, "rejected", 503, None), (2, "accepted", 200, None)]), 5) is None
    assert rejected_before(sends([(1, "indefinite", None, "timeout")]), None) is None
    assert rejected_before(sends([(9, "rejected", 503, None)]), 5) is None  # rejected during the fault: a finding
    assert rejected_before(sends([]), None) is None


def test_an_identity_that_matches_no_record_is_an_error_with_an_example():
    counts = {"matched": 0, "unreadable": 3, "foreign": 0,
              "examples": {"unreadable": ["b'{\"user\": \"a\"}'"], "foreign": []}}
    error = identity_error(counts, "app.yaml: application.identity", "json_pointer: /id")
    assert error == ("app.yaml: application.identity: json_pointer: /id matched none of the 3 records in the topic "
                     "(3 unreadable, 0 with an id that is not one of the run's events); e.g. b'{\"user\": \"a\"}'")
    assert identity_error({**counts, "matched": 1}, "x", "key") is None
    assert identity_error({**counts, "unreadable": 0}, "x", "key") is None  # an empty topic: nothing to match


def app_run(tmp_path: Path, processed: dict) -> AppRun:
    section = parse_application({
        "services": [{"name": "web", "command": ["true"], "ready": {"log": "up"}}],
        "drive": {"request": {"url": "http://127.0.0.1:1/e"}, "rate": 10, "messages": 3},
        "identity": {"key": True}, "processed": processed}, "app.yaml: application", tmp_path)
    return AppRun(section, tmp_path, "r", "app.yaml: application")


def test_a_polled_source_is_decoded_by_the_id_form_while_the_drive_runs(tmp_path):
    decoder = app_run(tmp_path, {"http": {"url": "http://127.0.0.1:1/processed"}}).processed_decoder
    assert [decoder.id_value(i) for i in ("r-3", "r-03", "q-3", 3)] == [make_value_id(0, 3), -1, -1, -1]
    assert (decoder.counts.matched, decoder.counts.foreign) == (1, 3)


def test_an_output_topic_is_decoded_by_the_requests_sent_with_the_one_decoder(tmp_path):
    app = app_run(tmp_path, {"topic": {"name": "out"}})
    decoder = app.processed_decoder
    assert decoder(b"r-1", None) == -1  # nothing sent yet
    app._http = sends([(1, "accepted", 200, None), (2, "accepted", 200, None)])
    app.index_events()
    assert app.processed_decoder is decoder and decoder(b"r-1", None) == make_value_id(0, 1)
    assert decoder(b"r-2", None) == -1  # of the id form, but never sent


def test_processed_records_with_positions_make_the_offset_checks_applicable(tmp_path):
    url = "http://127.0.0.1:1/processed/records"
    without = app_run(tmp_path, {"http": {"url": url}}).manifest()
    assert {"redeliveries", "inconsistent_offsets", "observed_duplicates"} <= set(without["not_applicable"])
    assert without["processed"]["records"] is None
    records = {"id": "/id", "partition": "/partition", "offset": "/offset", "topic": "/topic"}
    app = app_run(tmp_path, {"http": {"url": url, "records": records}})
    app.processed_reads = pa.Table.from_pylist([
        {"consumer": 0, "generation": -1, "partition": p, "offset": o, "value_id": 1, "read_ns": 1, "poll_id": 0}
        for p, o in ((0, 4), (None, None))], schema=READS)
    manifest = app.manifest()
    na = manifest["not_applicable"]
    assert not {"redeliveries", "inconsistent_offsets", "observed_duplicates"} & set(na)
    assert "consumer's rebalances" in na["poll_skips"] and "exposes neither" not in na["poll_skips"]
    assert {"not_delivered", "ack_offset_mismatch"} & set(na) == {"ack_offset_mismatch"}
    assert manifest["processed"]["records"] == records
    assert manifest["processed_positions"] == {"with": 1, "without": 1}
class _Calls:
    """A stand-in for the AppRun and its fleet: records the calls in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.fleet = self
        self.instances = {("signup-processor", 0): object()}

    def poll_before_end(self, name):
        self.calls.append(("poll", name))

    def __getattr__(self, action):
        return lambda *args: self.calls.append((action, *args))


def test_a_fault_that_ends_an_instance_polls_the_processed_list_first_and_a_pause_does_not():
    app = _Calls()
    fleet = PollingFleet(app)
    fleet.kill("signup-processor", 0)
    fleet.terminate("signup-processor", 0, 5.0)
    fleet.restart("signup-processor", 0)
    fleet.stop("signup-processor", 0)
    assert app.calls == [("poll", "signup-processor"), ("kill", "signup-processor", 0),
                         ("poll", "signup-processor"), ("terminate", "signup-processor", 0, 5.0),
                         ("poll", "signup-processor"), ("restart", "signup-processor", 0),
                         ("stop", "signup-processor", 0)]
    assert fleet.instances == app.instances


def test_the_manifest_names_each_file_a_service_ran_by_its_digest(tmp_path):
    from kafkaproof.run.app_run import file_digests
    jar = tmp_path / "svc.jar"
    jar.write_bytes(b"PK\x03\x04 a jar")
    known: dict[str, str] = {}
    digests = file_digests(["java", "-Xmx64m", "-jar", str(jar), "--server.port=1", str(tmp_path)], known)
    assert digests == {str(jar): "sha256:" + __import__("hashlib").sha256(b"PK\x03\x04 a jar").hexdigest()}
    jar.write_bytes(b"changed")  # a second instance of the run: the digest taken once
    assert file_digests([str(jar)], known) == digests
