"""Application scenarios end to end (issue 39): the catalog's E6 pair on a real local cluster, the example
application built with real Maven and driven over real HTTP, analysed by the real Spark job and judged by
the GX suites; and a service that never becomes ready, which ends the run as an error naming it with
nothing left running.

Marked `long`: the first build of the example downloads Spring Boot into ~/.m2, and each service takes
~10 s to start beside three brokers.
"""
from __future__ import annotations

import json
import logging
import subprocess
import time

import pytest

from kafkaproof import analysis, pipeline
from kafkaproof.cluster import procs
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec.scenario import Scenario, validate_document
from kafkaproof.verdict.validation import format_result, validate

from support import leftovers

pytestmark = [pytest.mark.long, pytest.mark.cluster, pytest.mark.timeout(1200)]

log = logging.getLogger(__name__)

PAIR = ("app-e6-answer-before-ack", "app-e6-wait-for-ack")


def test_the_e6_pair_detects_accepted_but_lost_signups_and_the_wait_for_ack_twin_passes(tmp_path):
    runs = {}
    for scn in pipeline.suite(names=list(PAIR)):
        started = time.monotonic()
        result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path)).execute()
        log.info("%s: %s in %.1f s", scn.name, result.status, time.monotonic() - started)
        print(f"[app] {scn.name}: run {result.status} in {time.monotonic() - started:.1f} s", flush=True)
        assert result.status == "complete", result.error
        runs[scn.name] = result.run_dir
    started = time.monotonic()
    analysis.analyze_many(list(runs.values()), quiet=True)
    print(f"[app] analysis of both in {time.monotonic() - started:.1f} s", flush=True)
    verdicts = {name: validate(run_dir, data_docs=False) for name, run_dir in runs.items()}
    for name, v in verdicts.items():
        manifest = json.loads((runs[name] / "manifest.json").read_text())
        print(f"[app] {format_result(v)}\n[app] requests {manifest['application']['requests']} "
              f"decode {manifest['application']['decode']['read_committed']['matched']} matched", flush=True)

    before, after = verdicts["app-e6-answer-before-ack"], verdicts["app-e6-wait-for-ack"]
    assert before.status == "pass", format_result(before)  # the negative control found the loss
    lost = next(r for r in before.rows if r.anomaly == "lost")
    assert lost.count > 0 and lost.expected_detected
    assert after.status == "pass", format_result(after)
    assert next(r for r in after.rows if r.anomaly == "lost").count == 0
    for v in verdicts.values():  # never passed: reported not applicable with the reason
        reordering = next(r for r in v.rows if r.anomaly == "reordering")
        assert reordering.not_applicable and "concurrently" in reordering.not_applicable
        poll = next(r for r in v.rows if r.anomaly == "poll_skips")
        assert poll.not_applicable
    manifest = json.loads((runs["app-e6-answer-before-ack"] / "manifest.json").read_text())
    app = manifest["application"]
    assert app["services"][0]["name"] == "signup-service" and app["services"][0]["argv"][-1].startswith("--")
    assert app["requests"]["accepted"] > 0 and manifest["clients"] == {"producers": [], "consumers": []}
    assert not [e for e in procs.entries() if e.get("owner", "").endswith("-services")]
    assert not leftovers().get("kafka_processes")


def test_a_service_that_never_becomes_ready_is_an_error_naming_it_with_nothing_left_running(tmp_path):
    doc = {"name": "app-never-ready", "guarantee": "at-least-once", "cluster": {"brokers": 1},
           "topic": {"partitions": 1, "replication_factor": 1},
           "application": {
               "services": [{"name": "sleepy", "command": ["sh", "-c", "echo booting; sleep 600"],
                             "ready": {"log": "^started$"}, "ready_timeout_s": 3}],
               "drive": {"request": {"url": "http://127.0.0.1:9/e"}, "rate": 10, "messages": 5},
               "identity": {"key": True}}}
    scenario = Scenario("app-never-ready", "app-never-ready.yaml",
                        validate_document(doc, "app-never-ready.yaml"))
    result = ScenarioRun(resolve(scenario), RunOptions(out=tmp_path)).execute()
    assert result.status == "error"
    assert "service sleepy instance 0" in result.error and "'^started$'" in result.error
    assert "booting" in result.error  # its last log lines
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "error" and manifest["application"]["services"][0]["name"] == "sleepy"
    assert not [e for e in procs.entries() if e.get("owner") == f"{result.run_id}-services"]
    assert not leftovers().get("kafka_processes")
    assert subprocess.run(["pgrep", "-f", "echo booting; sleep 600"], capture_output=True).returncode == 1
