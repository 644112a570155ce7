"""The services runner: real local processes started, checked for readiness, faulted and always stopped."""
from __future__ import annotations

import os
import sys

import pytest

from kafkaproof.cluster import procs, process
from kafkaproof.errors import ApplicationError
from kafkaproof.run.services import ServiceFleet, ServiceSpec

pytestmark = pytest.mark.unit

RUN = {"bootstrap": "127.0.0.1:9092", "topic": "signups", "group": "g1", "run_id": "r1"}
HTTP = [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"]
LOGS_STARTED = [sys.executable, "-u", "-c",
                "import os, time; time.sleep(0.3); print('started', os.environ['TOPIC']); time.sleep(60)"]


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))


def http_service(**kw) -> ServiceSpec:
    return ServiceSpec("web", HTTP, ready_url="http://127.0.0.1:{port}/", ready_timeout_s=10, **kw)


def alive(pid: int) -> bool:
    return process.state_of(process.ref_for(pid)) != "dead" if process.start_ticks(pid) else False


def test_a_spec_needs_exactly_one_readiness_check():
    with pytest.raises(ApplicationError, match="exactly one readiness check"):
        ServiceSpec("web", ["true"])
    with pytest.raises(ApplicationError, match="exactly one readiness check"):
        ServiceSpec("web", ["true"], ready_url="http://x/", ready_log="up")


def test_http_readiness_two_instances_registered_while_running_and_gone_after(tmp_path):
    with ServiceFleet([http_service(instances=2)], tmp_path, "r1-services") as fleet:
        fleet.start(RUN)
        pids = [fleet.pid("web", 0), fleet.pid("web", 1)]
        assert all(pids) and fleet.instances[("web", 0)].port != fleet.instances[("web", 1)].port
        [entry] = procs.entries()
        assert entry["owner"] == "r1-services"
        assert sorted(p["pid"] for p in procs.live(entry)) == sorted(pids)
        assert {p["role"] for p in entry["processes"]} == {"service"}
    assert procs.entries() == []
    assert not any(alive(p) for p in pids)
    assert (tmp_path / "services" / "web-0.log").exists()


def test_log_line_readiness_with_env_placeholders(tmp_path):
    spec = ServiceSpec("worker", LOGS_STARTED, env={"TOPIC": "{topic}"}, ready_log=r"^started signups$",
                       ready_timeout_s=5)
    with ServiceFleet([spec], tmp_path, "r1-services") as fleet:
        fleet.start(RUN)
        assert fleet.pid("worker", 0)
    assert "started signups" in (tmp_path / "services" / "worker-0.log").read_text()


def test_a_service_that_exits_at_once_is_named_with_its_last_log_lines(tmp_path):
    crash = ServiceSpec("billing", [sys.executable, "-c", "print('no config at /etc/billing'); raise SystemExit(3)"],
                        ready_log="started", ready_timeout_s=5)
    with pytest.raises(ApplicationError) as e:
        with ServiceFleet([crash], tmp_path, "r1-services") as fleet:
            fleet.start(RUN)
    message = str(e.value)
    assert "service billing instance 0 exited with code 3" in message
    assert "a log line matching 'started'" in message and "no config at /etc/billing" in message
    assert procs.entries() == []


def test_a_command_that_cannot_start_is_named(tmp_path):
    missing = ServiceSpec("ghost", [str(tmp_path / "no-such-binary")], ready_log="up")
    with pytest.raises(ApplicationError, match="service ghost instance 0 could not start"):
        with ServiceFleet([missing], tmp_path, "r1-services") as fleet:
            fleet.start(RUN)
    assert fleet.pid("ghost", 0) is None and procs.entries() == []


def test_a_service_never_ready_times_out_and_is_gone(tmp_path):
    slow = ServiceSpec("slow", [sys.executable, "-u", "-c", "print('warming up'); import time; time.sleep(60)"],
                       ready_url="http://127.0.0.1:{port}/health", ready_timeout_s=1)
    fleet = ServiceFleet([slow], tmp_path, "r1-services")
    with pytest.raises(ApplicationError) as e:
        fleet.start(RUN)
    port = fleet.instances[("slow", 0)].port
    assert (f"service slow instance 0 was not ready within 1 s (HTTP GET http://127.0.0.1:{port}/health "
            f"answering 2xx)") in str(e.value)
    assert "warming up" in str(e.value)
    assert fleet.pid("slow", 0) is None and procs.entries() == []


def test_kill_then_restart_gives_a_new_ready_process_on_the_same_port(tmp_path):
    with ServiceFleet([http_service()], tmp_path, "r1-services") as fleet:
        fleet.start(RUN)
        old = fleet.pid("web", 0)
        fleet.kill("web", 0)
        assert fleet.pid("web", 0) is None
        fleet.restart("web", 0)
        new = fleet.pid("web", 0)
        assert new and new != old and fleet.instances[("web", 0)].is_ready()
        fleet.stop("web", 0)
        assert process.state_of(fleet.instances[("web", 0)].ref) == "paused"
        fleet.resume("web", 0)
        assert process.state_of(fleet.instances[("web", 0)].ref) == "running"
    assert not alive(new)


def test_a_crashed_run_s_services_are_stopped_by_the_registry(tmp_path):
    fleet = ServiceFleet([http_service()], tmp_path, "r1-services")
    fleet.start(RUN)
    pid = fleet.pid("web", 0)
    fleet.stop("web", 0)  # a paused leftover must stop too
    stopped = procs.stop_all()  # `kafkaproof cluster down --all` after the run died without its clean-up
    assert stopped == [f"service (pid {pid})"]
    fleet.instances[("web", 0)].popen.wait(5)  # reap it: we are its parent in this test
    assert not alive(pid) and procs.entries() == []
    assert os.path.exists(tmp_path / "services" / "web-0.log")


def test_children_that_outlive_their_service_are_stopped_with_it(tmp_path):
    # The shell ends on SIGTERM; its child ignores SIGTERM and would be left running without the group's SIGKILL.
    spec = ServiceSpec("wrapper", ["sh", "-c", "(trap '' TERM; exec sleep 60) & echo child $!; wait"],
                       ready_log=r"^child \d+$", ready_timeout_s=10)
    with ServiceFleet([spec], tmp_path, "r2-services", grace_s=1.0) as fleet:
        fleet.start(RUN)
        leader = fleet.pid("wrapper", 0)
        child = int((tmp_path / "services" / "wrapper-0.log").read_text().split()[1])
        assert alive(child)
    assert not alive(leader) and not alive(child) and procs.entries() == []
