"""audit.html from hand-written audit.json documents (the contract's shape): a pass, a fail with a proven fix,
--max-classes grouping, an error before any replica ran; escaping and no Python sentinels on the page."""
from __future__ import annotations

import copy
import json
import re

import pytest

from kafkaproof.report.audit_page import PAGE, outcome_text, utc, words, write_audit_page
from kafkaproof.spec.audit_findings import audit_findings
from kafkaproof.spec.audit_plan import plan_audit
from kafkaproof.spec.inventory import ClusterInventory, NodeInfo, TopicInfo

from report_runs import text_of

pytestmark = pytest.mark.unit

T0 = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC
BROKERS = {"auto.create.topics.enable": "true", "default.replication.factor": "1", "num.partitions": "1",
           "min.insync.replicas": "1", "unclean.leader.election.enable": "false",
           "offsets.topic.replication.factor": "3"}


def topic(name, rf=1, partitions=1, min_isr="1", cleanup="delete", overrides=(), internal=False) -> TopicInfo:
    return TopicInfo(name=name, internal=internal, partitions=partitions, replication_factor=rf,
                     config={"min.insync.replicas": min_isr, "unclean.leader.election.enable": "false",
                             "retention.ms": None, "cleanup.policy": cleanup},
                     overrides=overrides, replicas=tuple((1,) * rf for _ in range(partitions)),
                     under_replicated=0, offline=0)


INVENTORY = ClusterInventory(
    bootstrap="k1:9092", cluster_id="prod-<eu>", kafka_release="3.9", metadata_version="3.9-IV0", controller_id=1,
    controller_quorum=None, nodes=tuple(NodeInfo(i, f"k{i}", 9092, None, ("broker", "controller")) for i in (1, 2, 3)),
    broker_config=dict(BROKERS), broker_config_differs={},
    topics=(topic("events"), topic("orders", rf=3, partitions=6, min_isr="2", overrides=("min.insync.replicas",)),
            topic("users", rf=3, partitions=3, min_isr="2", cleanup="compact",
                  overrides=("cleanup.policy", "min.insync.replicas")),
            topic("__consumer_offsets", rf=3, partitions=50, internal=True)),
    groups=(), discovered_wall=T0)
FAULTS = {"leader-kill": "the partition leader's broker killed (SIGKILL) for 10 s",
          "leader-outage": "the partition leader's broker stopped for longer than the producer's delivery.timeout.ms"}


def run_row(fault, status="passed", counts=None, first=None, report="runs/r1/report/index.html", error=None):
    return {"fault": fault, "scenario": f"audit-x-{fault}", "run_id": "r1", "run_dir": "runs/r1", "report": report,
            "status": status, "error": error, "counts": counts or {}, "first_wall": first or {}}


def document(max_classes=None, **changes) -> dict:
    plan = plan_audit(INVENTORY, None, max_classes)
    classes = []
    for cls in plan.classes:
        classes.append({"label": cls.label, "topics": list(cls.topics), "settings": dict(cls.settings),
                        "grouped": [{"topic": g.topic, "from_class": g.from_class, "differs": g.differs}
                                    for g in cls.grouped],
                        "verdict": "pass", "runs": [run_row(f) for f in FAULTS], "fix": None, "fixes_tried": []})
    doc = {"kind": "kafkaproof-audit", "schema": 1, "audit_id": "audit-20261117T000000-ab12",
           "started_wall": T0, "finished_wall": T0 + 600, "bootstrap": "k1:9092", "verdict": "pass",
           "exit_code": 0, "errors": [], "inventory": INVENTORY.to_dict(), "client_settings": None,
           "plan": plan.to_dict(), "findings": [f.to_dict() for f in audit_findings(INVENTORY, None, plan)],
           "faults": FAULTS, "suite_dir": "/tmp/audit/suite", "classes": classes, "excluded": dict(plan.excluded)}
    doc.update(changes)
    return json.loads(json.dumps(doc))  # what audit.json gives back


def failed_with_fix() -> dict:
    doc = document(verdict="fail", exit_code=1)
    rf1 = doc["classes"][0]
    assert rf1["topics"] == ["events"]
    rf1["verdict"] = "fail"
    rf1["runs"][1] = run_row("leader-outage", "failed", {"not_delivered": 512, "duplicated": 3},
                             {"not_delivered": T0 + 70, "duplicated": T0 + 71.5},
                             report="/abs/runs/r2/report/index.html")
    fix_runs = [run_row(f, report=f"runs/fix-{f}/report/index.html") for f in FAULTS]
    rf1["fix"] = {"fixes": ["rf3", "min-isr-2"], "changes": ["brokers' default.replication.factor 3",
                                                             "brokers' min.insync.replicas 2"], "runs": fix_runs}
    rf1["fixes_tried"] = [
        {"fixes": ["rf3"], "changes": ["brokers' default.replication.factor 3"], "outcome": "failed",
         "runs": [run_row("leader-kill", "failed", {"lost": 4}, {"lost": T0 + 5})]},
        {"fixes": ["rf3", "min-isr-2"], "changes": rf1["fix"]["changes"], "outcome": "passed", "runs": fix_runs}]
    return doc


def render(doc, tmp_path) -> tuple[str, str]:
    path = write_audit_page(doc, tmp_path)
    assert path == tmp_path / PAGE
    html = path.read_text()
    return html, text_of(html)


def no_sentinels(text: str) -> None:
    assert not re.search(r"\b(None|nan|NaN|inf|null|True|False)\b", text), text


def test_a_passing_audit(tmp_path):
    html, text = render(document(), tmp_path)
    assert "PASS: no topic lost, missed or duplicated events under the fault matrix (3 classes, 3 topics)" in text
    assert 'class="verdict pass"' in html and "<script" not in html and "<link" not in html  # self-contained
    assert "Audit of prod-<eu>" in text and "prod-&lt;eu&gt;" in html  # escaped
    assert "bootstrap k1:9092" in text and "discovered 2026-11-18 11:06:40 UTC" in text and "UTC" in text
    assert "Kafka 3.9 (metadata.version 3.9-IV0)" in text and "3 nodes: 1 k1:9092 (broker+controller)" in text
    # broker findings first, then client, then the topics
    assert text.index("Broker settings") < text.index("Client settings") < text.index("Topics: what the replica")
    assert "auto-created topics get RF 1" in text and "no client settings were given" in text
    assert "1 partition, RF 1, min ISR 1, cleanup delete, looks auto-created" in text
    assert "3 partitions, RF 3, min ISR 2, cleanup compact" in text
    assert text.count("none needed") == 3 and "No fix was tried." in text
    assert 'href="runs/r1/report/index.html"' in html
    assert "__consumer_offsets internal topic" in text  # excluded, with why
    no_sentinels(text)


def test_a_failing_audit_with_a_proven_fix(tmp_path):
    html, text = render(failed_with_fix(), tmp_path)
    assert "FAIL: 1 of 3 reliability classes failed (1 topic); a fix proven for 1" in text
    assert "rf1-isr1-auto (events): leader-outage: not delivered 512, duplicated 3; proven fix: brokers' " \
           "default.replication.factor 3; brokers' min.insync.replicas 2" in text
    # the topic's row: counts, first times in UTC, the replica run's report (absolute path made relative)
    row = text[text.index("events 1 partition"):text.index("orders 6 partitions")]
    assert "not delivered 512, duplicated 3" in row
    assert f"first not delivered {utc(T0 + 70)}; first duplicated {utc(T0 + 71.5)}" in row
    assert "proven: brokers' default.replication.factor 3; brokers' min.insync.replicas 2" in row
    assert re.search(r'href="(\.\./)+abs/runs/r2/report/index.html"', html)
    # fixes tried, with their outcomes
    tried = text[text.index("Fixes tried"):]
    assert "rf1-isr1-auto rf3 brokers' default.replication.factor 3 fail leader-kill: lost 4" in tried
    assert "rf3+min-isr-2" in tried and "pass" in tried
    no_sentinels(text)


def test_no_fix_passed_and_not_tried(tmp_path):
    doc = failed_with_fix()
    doc["classes"][0]["fix"] = None
    doc["classes"][0]["fixes_tried"][1]["outcome"] = "not confirmed"
    _, text = render(doc, tmp_path)
    assert "no fix on the list passed" in text and "not confirmed" in text
    doc["classes"][0]["fixes_tried"] = []
    _, text = render(doc, tmp_path)
    assert "not tried" in text and "no fix on the list passed" not in text


def test_grouped_topics_say_which_class_and_what_differed(tmp_path):
    _, text = render(document(max_classes=2), tmp_path)
    assert "Grouped topics (--max-classes 2)" in text
    assert "users rf3-isr2 rf3-isr2-compact cleanup.policy=compact" in text


def test_an_error_before_any_replica_ran(tmp_path):
    doc = document(verdict="error", exit_code=2, inventory=None, plan=None, findings=[], classes=[], excluded={},
                   faults={}, suite_dir=None,
                   errors=["DescribeConfigs (topics) on the cluster at k1:9092 was refused "
                           "(TOPIC_AUTHORIZATION_FAILED): the audit needs DescribeConfigs on each TOPIC"])
    html, text = render(doc, tmp_path)
    assert 'class="verdict error"' in html and "ERROR: the audit could not give a verdict" in text
    assert "TOPIC_AUTHORIZATION_FAILED" in text
    assert "cluster id not read" in text and "Kafka release not read" in text and "discovered unknown" in text
    assert "No topic was run on a replica" in text and "No class was planned." in text
    no_sentinels(text)


def test_a_run_that_errored_and_hostile_text_is_escaped(tmp_path):
    doc = document(verdict="error", exit_code=2)
    doc["classes"][1]["verdict"] = "error"
    doc["classes"][1]["runs"][0] = run_row("leader-kill", "error", report=None,
                                           error="fault <kill> did not take effect & no leader change")
    doc["classes"][1]["topics"] = ["<img src=x onerror=alert(1)>"]
    doc["findings"][0]["text"] = "<b>bold</b>"
    html, text = render(doc, tmp_path)
    assert "<img src=x" not in html and "<b>bold</b>" not in html
    assert "error: fault <kill> did not take effect & no leader change" in text and "no run report" in text
    assert "not tried (its runs ended in error)" in text
    assert "not read" in text  # a topic the inventory does not have


def test_words_and_times_never_print_python_values():
    assert [words(v) for v in (None, True, float("nan"), float("inf"), [1, None], {"a": None})] == \
        ["not set", "yes", "not a number", "unbounded", "1, not set", "a=not set"]
    assert utc(None) == utc(float("nan")) == utc("soon") == "unknown"
    assert utc(0) == "1970-01-01 00:00:00 UTC"
    assert outcome_text({"status": "failed", "counts": {"lost": 2, "weird_kind": 1, "duplicated": 0}}) == \
        "lost 2, weird_kind 1"
    assert outcome_text({"status": "error"}) == "error: no reason recorded"
    assert outcome_text({"status": "passed", "counts": {}}) == "passed"
    doc = copy.deepcopy(document())
    assert doc["kind"] == "kafkaproof-audit"


def test_list_audits_reads_every_audit_json_newest_first(tmp_path):
    import os
    from kafkaproof.report.audit_page import AUDITS_DIR, audit_dir_name, list_audits
    assert list_audits(tmp_path) == []
    first = tmp_path / AUDITS_DIR / audit_dir_name("manual__2026-11-27T10:00:00+00:00")
    write_audit_page(document(), first)
    (first / "audit.json").write_text(json.dumps(document()))
    second = tmp_path / AUDITS_DIR / "broken"
    second.mkdir()
    (second / "audit.json").write_text("{not json")
    os.utime(first / "audit.json", (T0, T0))
    found = list_audits(tmp_path)
    assert [(a["dir"], a["verdict"], a["page"]) for a in found] == [("broken", "unreadable", False),
                                                                   (first.name, "pass", True)]
    assert found[1]["audit_id"] == "audit-20261117T000000-ab12" and found[1]["finished"] == utc(T0 + 600)
    assert found[0]["audit_id"] == "broken" and found[0]["bootstrap"] == "unknown"
    assert "/" not in first.name and ":" not in first.name and "+" not in first.name
