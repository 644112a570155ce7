"""Application scenarios end to end (issue 39): the catalog's `app` scenarios on a real local cluster, the
example application built with real Maven and driven over real HTTP, analysed by the real Spark job and
judged by the GX suites; and a service that never becomes ready, which ends the run as an error naming it
with nothing left running.

The E6 pair and the consumer-kill pair are the basic form in `make test` (four runs of ~40-60 s and one
Spark submit) with the bad input refused on real processes (a service never ready, an endpoint rejecting
every request, an identity matching no record: ~20 s); the lost-ack pair is marked `long`, and so is the
poison control through fault proxies (what they delivered to the consumer group vs what it processed, ~65 s). The first build of the example downloads Spring Boot into
~/.m2 (cached after), and each service takes ~5-10 s to start beside three brokers.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof import pipeline

from kafkaproof.cluster import procs
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec.scenario import Scenario, validate_document
from kafkaproof.verdict.validation import format_result

from app_pair import check_e6_pair, run_and_judge
from support import leftovers

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

log = logging.getLogger(__name__)

PAIR = ("app-e6-answer-before-ack", "app-e6-wait-for-ack")
KILL_PAIR = ("app-processor-killed-batch-ack", "app-processor-skips-poison")
LOST_ACK_PAIR = ("app-lost-acks-processed-twice", "app-lost-acks-deduplicated")


def count(verdict, kind: str) -> int:
    return next(r for r in verdict.rows if r.anomaly == kind).count


def values(run_dir):
    return pq.read_table(run_dir / "analysis" / "values.parquet").to_pandas()


def check_the_e6_pair(runs: dict, verdicts: dict) -> None:
    """The answer-before-ack service's accepted-but-lost sign-ups detected, its wait-for-ack twin passing;
    the checks an application cannot expose reported n/a, never passed."""
    check_e6_pair(verdicts, PAIR)
    for v in (verdicts[name] for name in PAIR):  # never passed: reported not applicable with the reason
        reordering = next(r for r in v.rows if r.anomaly == "reordering")
        assert reordering.not_applicable and "concurrently" in reordering.not_applicable
        poll = next(r for r in v.rows if r.anomaly == "poll_skips")
        assert poll.not_applicable
    manifest = json.loads((runs["app-e6-answer-before-ack"] / "manifest.json").read_text())
    app = manifest["application"]
    assert app["services"][0]["name"] == "signup-service" and app["services"][0]["argv"][-1].startswith("--")
    assert app["requests"]["accepted"] > 0 and manifest["clients"] == {"producers": [], "consumers": []}


def check_the_kill_pair(runs: dict, verdicts: dict) -> None:
    """A killed processor redelivers and loses nothing; one that skips poison sign-ups is caught."""
    killed, poison = verdicts["app-processor-killed-batch-ack"], verdicts["app-processor-skips-poison"]
    assert killed.status == "pass", format_result(killed)
    assert count(killed, "not_delivered") == 0 and count(killed, "lost") == 0
    assert [c["held"] for c in killed.exercised if c["check"] == "fault_took_effect"] == [True]
    manifest = json.loads((runs["app-processor-killed-batch-ack"] / "manifest.json").read_text())
    assert manifest["application"]["processed_polls"]["restarts"] >= 1  # the list began anew after the kill
    # no fault proxies: what the consumers were handed is not measured, and the manifest says so
    assert manifest["application"]["delivered"] == {"measured": False, "reason": "not measured (no proxy)"}
    v = values(runs["app-processor-killed-batch-ack"])
    accepted = v[v.outcome == "ok"]
    assert len(accepted) == manifest["application"]["requests"]["accepted"] > 0
    assert (accepted.read_count >= 1).all()  # what an earlier life listed still counts at the end
    print(f"[app] redelivered after the restart: {(v.read_count > 1).sum()}", flush=True)

    assert poison.status == "pass", format_result(poison)  # the negative control found the skipped sign-ups
    row = next(r for r in poison.rows if r.anomaly == "not_delivered")
    assert row.expected_detected
    v = values(runs["app-processor-skips-poison"])
    sends = pq.read_table(runs["app-processor-skips-poison"] / "sends.parquet").to_pandas()
    poisoned = set(sends[(sends.outcome == "ok") & (sends.seq % 10 == 7)].value_id)
    assert poisoned and set(v[v.not_delivered].value_id) == poisoned  # exactly the ids ending in 7


def test_the_e6_pair_and_the_consumer_kill_pair_each_get_their_claimed_verdict(tmp_path):
    """The basic form in `make test`: four runs on real processes, one Spark submit."""
    results, verdicts = run_and_judge(PAIR + KILL_PAIR, tmp_path, "app")
    runs = {name: result.run_dir for name, result in results.items()}
    check_the_e6_pair(runs, verdicts)
    check_the_kill_pair(runs, verdicts)
    assert not [e for e in procs.entries() if e.get("owner", "").endswith("-services")]
    assert not leftovers().get("kafka_processes")


@pytest.mark.long
def test_lost_acks_put_signups_in_the_log_twice_processed_twice_unless_the_processor_deduplicates(tmp_path):
    results, verdicts = run_and_judge(LOST_ACK_PAIR, tmp_path, "app")
    runs = {name: result.run_dir for name, result in results.items()}
    twice, once = verdicts["app-lost-acks-processed-twice"], verdicts["app-lost-acks-deduplicated"]
    assert twice.status == "pass", format_result(twice)  # the negative control found them
    assert count(twice, "reprocessed") > 0 and count(twice, "duplicates") > 0
    assert once.status == "pass", format_result(once)
    assert count(once, "duplicates") > 0 and count(once, "reprocessed") == 0  # in the log twice, processed once
    for name, run_dir in runs.items():
        manifest = json.loads((run_dir / "manifest.json").read_text())
        cluster = manifest["cluster"]
        assert cluster["proxy"] and cluster["bootstrap_servers"] != cluster["direct_bootstrap"]
        for service in manifest["application"]["services"]:  # {bootstrap} is the proxies' addresses
            assert f"--spring.kafka.bootstrap-servers={cluster['bootstrap_servers']}" in service["argv"], name


@pytest.mark.long
def test_through_proxies_every_accepted_signup_is_delivered_and_the_poison_ones_never_processed(tmp_path):
    """The poison-skipping processor with fault proxies in front of the brokers (no proxy fault): the proxies'
    delivery logs show every accepted sign-up handed to the consumer group, and exactly the poison ones
    (ids ending in 7) handed over but never processed. ~60 s, no Spark."""
    (catalog,) = pipeline.suite(names=["app-processor-skips-poison"])
    doc = yaml.safe_load(Path(catalog.path).read_text())
    doc["cluster"]["proxy"] = True
    scenario = Scenario(catalog.name, catalog.path, validate_document(doc, str(catalog.path)))
    started = time.monotonic()
    result = ScenarioRun(resolve(scenario), RunOptions(out=tmp_path)).execute()
    print(f"[app] {scenario.name} through proxies: run {result.status} in {time.monotonic() - started:.1f} s",
          flush=True)
    assert result.status == "complete", result.error
    delivered = json.loads((result.run_dir / "manifest.json").read_text())["application"]["delivered"]
    print(f"[app] delivered: {json.dumps({k: v for k, v in delivered.items() if k != 'proxies'})}", flush=True)
    sends = pq.read_table(result.run_dir / "sends.parquet").to_pandas()
    accepted = set(sends[sends.outcome == "ok"].value_id)
    poison = set(sends[(sends.outcome == "ok") & (sends.seq % 10 == 7)].value_id)
    handed = pq.read_table(result.run_dir / "delivered.parquet").to_pandas()
    processed = set(pq.read_table(result.run_dir / "reads.parquet").column("value_id").to_pylist())
    assert accepted and poison and accepted <= set(handed.value_id)  # every accepted sign-up handed over
    assert not poison & processed and accepted - poison <= processed
    assert delivered["measured"] and delivered["accepted"] == delivered["delivered"] == len(accepted)
    assert delivered["never_delivered"]["count"] == 0 and delivered["processed"] == len(accepted - poison)
    assert delivered["delivered_not_processed"]["count"] == len(poison)
    assert all(e.endswith("7") for e in delivered["delivered_not_processed"]["examples"])
    assert not delivered["truncated"] and delivered["unread_batches"] == 0 and delivered["complete"]
    times = handed[handed.value_id.isin(poison)].groupby("value_id").size()
    print(f"[app] {len(handed)} records handed over; each poison sign-up {times.min()}-{times.max()} times",
          flush=True)


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


# A stand-in application: answers POST /e with 202 and writes the event to Kafka as {"user": <id>}, or
# answers 400 to everything (argv[4] == "reject"); GET / is its readiness check.
STAND_IN = '''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from confluent_kafka import Producer

port, bootstrap, topic, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
producer = Producer({"bootstrap.servers": bootstrap})

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if mode == "reject":
            self.send_response(400); self.end_headers(); return
        producer.produce(topic, json.dumps(dict(user=event["id"])).encode())
        producer.flush(5)
        self.send_response(202); self.end_headers()
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def stand_in_run(tmp_path, mode: str):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    doc = {"name": f"app-stand-in-{mode}", "guarantee": "at-least-once", "cluster": {"brokers": 1},
           "topic": {"partitions": 1, "replication_factor": 1},
           "application": {
               "services": [{"name": "stand-in", "command": [sys.executable, str(script), "{port}", "{bootstrap}",
                                                               "{topic}", mode],
                             "ready": {"http": "http://127.0.0.1:{port}/"}, "ready_timeout_s": 30}],
               "drive": {"service": "stand-in",
                         "request": {"url": "http://127.0.0.1:{port}/e", "body": '{"id": "{id}"}'},
                         "rate": 20, "messages": 20},
               "identity": {"json_pointer": "/id"}}}
    scenario = Scenario(doc["name"], f"{doc['name']}.yaml", validate_document(doc, f"{doc['name']}.yaml"))
    return ScenarioRun(resolve(scenario), RunOptions(out=tmp_path)).execute()


def test_an_endpoint_rejecting_every_request_and_an_identity_matching_no_record_are_errors(tmp_path):
    rejected = stand_in_run(tmp_path, "reject")
    assert rejected.status == "error"
    assert "application.drive.request: the application rejected all 20 requests sent" in rejected.error
    assert "HTTP 400" in rejected.error
    unmatched = stand_in_run(tmp_path, "write")
    assert unmatched.status == "error"
    assert "application.identity: json_pointer: /id matched none of the 20 records" in unmatched.error
    assert "user" in unmatched.error  # an example record
    manifest = json.loads((unmatched.run_dir / "manifest.json").read_text())
    assert manifest["application"]["decode"]["read_uncommitted"]["unreadable"] == 20
    assert not [e for e in procs.entries() if e.get("owner", "").startswith("app-stand-in")]
