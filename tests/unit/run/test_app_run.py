"""The application side of a run (run/app_run.py): its pure parts. The run itself, with real services,
Kafka and HTTP, is tests/cluster/test_app_scenarios.py."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kafkaproof.errors import ApplicationError
from kafkaproof.run.app_run import PollingFleet, identity_error, rejected_before, resolve_example_app
from kafkaproof.run.http_driver import HTTP_SENDS

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
