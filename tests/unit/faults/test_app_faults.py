"""Application faults on real local processes: a fleet of tiny HTTP servers (no Kafka) killed, stopped, paused
and restarted through `AppHandler`, with the fault log's inject and heal rows as the evidence; and a run's
timeline routing `app:` faults to it."""
from __future__ import annotations

import json
import sys
import time
import urllib.request

import pytest

from kafkaproof.errors import ApplicationError, FaultError, KafkaproofError
from kafkaproof.faults import AppHandler, FaultInjector
from kafkaproof.run.scenario_run import ScenarioRun
from kafkaproof.run.services import ServiceFleet, ServiceSpec
from kafkaproof.run.timeline import Timeline
from kafkaproof.spec.faults import PROXY_KINDS, FaultSpec
from kafkaproof.spec.scenario import TimelineFault

pytestmark = pytest.mark.unit

RUN = {"bootstrap": "127.0.0.1:9092", "topic": "signups", "group": "g1", "run_id": "r1"}
HTTP = [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"]


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))


@pytest.fixture
def fleet(tmp_path):
    spec = ServiceSpec("web", HTTP, instances=2, ready_url="http://127.0.0.1:{port}/", ready_timeout_s=10)
    with ServiceFleet([spec], tmp_path, "r1-services") as fleet:
        fleet.start(RUN)
        yield fleet


def rows(fault_log) -> list[dict]:
    return [json.loads(line) for line in fault_log.read_text().splitlines()]


def answers(fleet: ServiceFleet, i: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{fleet.instances[('web', i)].port}/", timeout=2) as r:
        return r.status == 200


def test_a_killed_instance_is_dead_and_the_heal_starts_it_again_on_its_port(fleet, tmp_path):
    log, handler = tmp_path / "faults.jsonl", AppHandler(fleet)
    pid, port = fleet.pid("web", 1), fleet.instances[("web", 1)].port
    fid = handler.inject(FaultSpec("kill", "app:web:1"), log, {"scenario_index": 0})
    [inject] = rows(log)
    assert inject["effect"] == {"app_states": {"web:1": "dead"}} and inject["params"] == {"pids": {"web:1": pid}}
    assert inject["annotations"] == {"scenario_index": 0} and inject["nodes"] == []
    assert fleet.state("web", 0) == "running"  # only the targeted instance
    handler.heal(fid, log)
    heal = rows(log)[1]
    assert heal["event"] == "heal" and heal["fault_id"] == fid and heal["app_restarted"] == {"web:1": True}
    assert fleet.pid("web", 1) not in (None, pid) and fleet.instances[("web", 1)].port == port and answers(fleet, 1)
    assert handler.active == {}


def test_a_paused_instance_is_resumed_at_heal(fleet, tmp_path):
    log, handler = tmp_path / "faults.jsonl", AppHandler(fleet)
    pid = fleet.pid("web", 0)
    fid = handler.inject(FaultSpec("pause", "app:web:0"), log)
    assert rows(log)[0]["effect"] == {"app_states": {"web:0": "paused"}}
    handler.heal(fid, log)
    assert rows(log)[1]["app_resumed"] == {"web:0": True}
    assert fleet.pid("web", 0) == pid and answers(fleet, 0)


def test_a_service_target_hits_every_instance(fleet, tmp_path):
    log, handler = tmp_path / "faults.jsonl", AppHandler(fleet)
    fid = handler.inject(FaultSpec("stop", "app:web", {"timeout_s": 5}), log)
    assert rows(log)[0]["effect"] == {"app_states": {"web:0": "dead", "web:1": "dead"}}
    handler.heal(fid, log)
    assert rows(log)[1]["app_restarted"] == {"web:0": True, "web:1": True}
    assert answers(fleet, 0) and answers(fleet, 1)


def test_a_restart_is_over_at_injection_and_its_heal_records_it_came_back(fleet, tmp_path):
    log, handler = tmp_path / "faults.jsonl", AppHandler(fleet)
    pid = fleet.pid("web", 0)
    fid = handler.inject(FaultSpec("restart", "app:web:0"), log)
    assert rows(log)[0]["effect"] == {"app_states": {"web:0": "running"}}
    assert fleet.pid("web", 0) not in (None, pid) and answers(fleet, 0)
    handler.heal(fid, log)
    assert rows(log)[1]["app_restarted"] == {"web:0": True}


def test_an_instance_that_does_not_come_back_is_logged_then_named(tmp_path):
    # ready the first time only: a second start finds its marker and exits
    once = [sys.executable, "-u", "-c", "import os, sys, time\n"
            "if os.path.exists('started'): sys.exit('already started once')\n"
            "open('started', 'w').close(); print('ready'); time.sleep(60)"]
    spec = ServiceSpec("once", once, cwd=str(tmp_path), ready_log="^ready$", ready_timeout_s=5)
    log = tmp_path / "faults.jsonl"
    with ServiceFleet([spec], tmp_path, "r1-services") as fleet:
        fleet.start(RUN)
        handler = AppHandler(fleet)
        fid = handler.inject(FaultSpec("kill", "app:once"), log)
        with pytest.raises(ApplicationError, match=f"heal of {fid}: service once instance 0 exited with code 1"):
            handler.heal(fid, log)
    assert rows(log)[1]["app_restarted"] == {"once:0": False}


def test_a_stop_the_instance_ignores_shows_it_running_and_the_heal_kills_and_starts_it(tmp_path):
    stubborn = [sys.executable, "-u", "-c", "import signal, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready'); time.sleep(60)"]
    spec = ServiceSpec("stubborn", stubborn, ready_log="^ready$", ready_timeout_s=5)
    log = tmp_path / "faults.jsonl"
    with ServiceFleet([spec], tmp_path, "r1-services", grace_s=0.5) as fleet:  # it ignores stop_all's SIGTERM too
        fleet.start(RUN)
        pid, handler = fleet.pid("stubborn", 0), AppHandler(fleet)
        fid = handler.inject(FaultSpec("stop", "app:stubborn", {"timeout_s": 0.3}), log)
        assert rows(log)[0]["effect"] == {"app_states": {"stubborn:0": "running"}}  # evidence it did not stop
        handler.heal(fid, log)
        assert rows(log)[1]["app_restarted"] == {"stubborn:0": True} and fleet.pid("stubborn", 0) not in (None, pid)


def test_an_app_fault_without_services_or_on_a_missing_instance_is_a_clear_error(fleet, tmp_path):
    log = tmp_path / "faults.jsonl"
    with pytest.raises(FaultError, match="kill app:web: this run starts no application services; app: faults "
                                         "need the scenario's `application` section"):
        AppHandler(None).inject(FaultSpec("kill", "app:web"), log)
    with pytest.raises(FaultError, match="app:web:2: no such service instance in this run; its services' "
                                         "instances: app:web:0, app:web:1"):
        AppHandler(fleet).inject(FaultSpec("kill", "app:web:2"), log)
    with pytest.raises(FaultError, match="app:db: no such service instance"):
        AppHandler(fleet).inject(FaultSpec("kill", "app:db"), log)
    assert not log.exists()


class Run:
    """What the timeline asks of a run: its entries, fault log and errors."""

    def __init__(self, entries: list[TimelineFault], fault_log):
        self.entries, self.fault_log, self.fault_errors = entries, fault_log, []
        self.scenario = self

    def timeline(self) -> list[TimelineFault]:
        return self.entries


def run_timeline(run: Run, services) -> None:
    timeline = Timeline(run, injector=None, workers=None, t0=time.monotonic(), services=services)
    timeline.start()
    deadline = time.monotonic() + 10
    while not timeline.finished() and time.monotonic() < deadline:
        time.sleep(0.05)
    timeline.heal_everything()


def test_the_run_routes_app_faults_to_its_services_and_heals_one_without_a_duration_at_once(fleet, tmp_path):
    run = Run([TimelineFault(0.0, FaultSpec("kill", "app:web:0"), 0.2, 0),
               TimelineFault(0.1, FaultSpec("pause", "app:web:1"), None, 1)], tmp_path / "faults.jsonl")
    run_timeline(run, fleet)
    assert run.fault_errors == []
    logged = rows(run.fault_log)
    assert sorted(r["target"] for r in logged if r["event"] == "inject") == ["app:web:0", "app:web:1"]
    assert {r["target"]: r.get("app_restarted") or r.get("app_resumed") for r in logged if r["event"] == "heal"} == {
        "app:web:0": {"web:0": True}, "app:web:1": {"web:1": True}}
    assert answers(fleet, 0) and answers(fleet, 1)


def test_an_app_fault_in_a_run_without_services_is_an_error_of_the_run(tmp_path):
    run = Run([TimelineFault(0.0, FaultSpec("kill", "app:web"), 0.2, 3)], tmp_path / "faults.jsonl")
    run_timeline(run, None)
    assert run.fault_errors == ["faults[3] (kill app:web at 0s for 0.2s): kill app:web: this run starts no "
                                "application services; app: faults need the scenario's `application` section"]


def test_an_existing_cluster_takes_app_faults_but_not_node_faults():
    entries = [TimelineFault(1.0, FaultSpec("kill", "app:web"), None, 0),
               TimelineFault(2.0, FaultSpec("pause", "consumer:0"), None, 1)]
    run = Run(entries, None)
    ScenarioRun._refuse_unsupported(run, frozenset(PROXY_KINDS), "external")
    run.entries.append(TimelineFault(3.0, FaultSpec("kill", "node:1"), None, 2))
    with pytest.raises(KafkaproofError, match="faults kill need the local cluster backend"):
        ScenarioRun._refuse_unsupported(run, frozenset(PROXY_KINDS), "external")


@pytest.mark.parametrize("target", ["app:web", "consumer:0"])
def test_a_cluster_refuses_faults_on_a_runs_own_processes(target, tmp_path):
    cluster = type("Cluster", (), {"name": "kp-test", "supported_faults": frozenset({"kill"})})()
    with pytest.raises(FaultError, match=f"kill {target}: .* faults act on a scenario run's own processes"):
        FaultInjector(cluster).inject(FaultSpec("kill", target))
