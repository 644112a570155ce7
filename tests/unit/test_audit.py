"""The audit runner: the fix search (pure), run_audit end to end with discovery and the batches faked at their
function boundaries (no cluster), the run_outcomes reader on a tiny run directory, and the CLI's argument errors."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kafkaproof import audit, batch, cli
from kafkaproof.audit import (AuditRequest, FixSearch, FixTrial, advance, audit_verdict, class_candidates,
                              class_verdict, fixed_document, next_trial, run_audit)
from kafkaproof.errors import ClusterError
from kafkaproof.report import data as report_data
from kafkaproof.spec.audit_plan import FAULTS, plan_audit

pytestmark = pytest.mark.unit


def _plan_cases():
    """The plan tests' cluster (THREE topics, the E1 Spring settings, `inventory`): one definition of them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("audit_plan_cases", Path(__file__).parent / "spec" / "test_audit_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cases = _plan_cases()
SPRING, THREE, inventory = _cases.SPRING, _cases.THREE, _cases.inventory


def row(fault: str, status: str = "passed", **counts: int) -> dict:
    return {"fault": fault, "scenario": f"s-{fault}", "run_id": None, "run_dir": None, "report": None,
            "status": status, "error": "boom" if status == "error" else None, "counts": counts, "first_wall": {}}


# --- the fix search ------------------------------------------------------------------------------

def search(**more) -> FixSearch:
    return FixSearch(**{"label": "rf1", "failed": ("leader-outage",), "passed": ("leader-kill",),
                        "candidates": (("rf3", "min-isr-2"), ("idempotence",), ("create-topic",)), "max_tries": 2,
                        **more})


def test_a_candidate_that_passes_the_failed_faults_is_confirmed_on_the_others_before_it_is_proven():
    s = search()
    first = next_trial(s)
    assert first == FixTrial("rf1", ("rf3", "min-isr-2"), ("leader-outage",))
    s = advance(s, first, [row("leader-outage")])
    assert s.proven is None and s.pending and s.pending.outcome == "pending"
    confirm = next_trial(s)
    assert confirm == FixTrial("rf1", ("rf3", "min-isr-2"), ("leader-kill",), confirm=True)
    s = advance(s, confirm, [row("leader-kill")])
    assert s.proven and s.proven.fixes == ("rf3", "min-isr-2")
    assert [r["fault"] for r in s.proven.rows] == ["leader-outage", "leader-kill"]  # the whole matrix
    assert next_trial(s) is None


def test_failed_unconfirmed_and_errored_candidates_count_as_tries_up_to_the_limit():
    s = search()
    s = advance(s, next_trial(s), [row("leader-outage", "failed", undelivered_attempts=3)])
    assert [t.outcome for t in s.tried] == ["failed"]
    trial = next_trial(s)
    assert trial.fixes == ("idempotence",)
    s = advance(s, trial, [row("leader-outage")])
    s = advance(s, next_trial(s), [row("leader-kill", "failed", lost=1)])
    assert [t.outcome for t in s.tried] == ["failed", "not confirmed"] and s.pending is None
    assert next_trial(s) is None and s.proven is None  # max_tries 2
    errored = advance(search(max_tries=5), next_trial(search()), [row("leader-outage", "error")])
    assert errored.tried[0].outcome == "error" and next_trial(errored).fixes == ("idempotence",)


def test_without_other_faults_passing_the_failed_ones_proves_it_and_no_candidate_means_no_trial():
    s = search(passed=())
    s = advance(s, next_trial(s), [row("leader-outage")])
    assert s.proven and s.proven.outcome == "passed"
    assert next_trial(search(candidates=())) is None


def test_verdicts_error_before_fail_before_pass():
    assert class_verdict([row("a"), row("b", "failed"), row("c", "error")]) == "error"
    assert class_verdict([row("a"), row("b", "failed")]) == "fail"
    assert class_verdict([row("a")]) == "pass"
    assert audit_verdict(["pass", "fail"]) == "fail" and audit_verdict(["fail", "error"]) == "error"
    assert audit_verdict(["pass"]) == "pass" and audit_verdict([]) == "error"


def test_candidates_apply_to_every_failed_fault_and_a_fix_applies_where_it_can():
    plan = plan_audit(inventory(*THREE), SPRING)
    auto = plan.classes[0]
    # delivery-timeout does not apply to leader-outage (the outage is the timeout + 10 s): not a candidate
    assert ("delivery-timeout",) in class_candidates(plan, auto, ["leader-kill"])
    assert ("delivery-timeout",) not in class_candidates(plan, auto, ["leader-kill", "leader-outage"])
    assert class_candidates(plan, auto, ["leader-outage"])[0] == ("rf3", "min-isr-2")
    doc, changes = fixed_document(plan, auto, "leader-kill", ("rf3", "min-isr-2"))
    assert doc["name"] == "audit-rf1-isr1-auto-leader-kill-fix-rf3-min-isr-2" and "audit-fix" in doc["tags"]
    assert changes[0].startswith("brokers' default.replication.factor 3")
    assert fixed_document(plan, auto, "leader-outage", ("delivery-timeout",)) is None  # runs unchanged


# --- run_audit end to end, faked at discovery and the batch ---------------------------------------

LIBRDKAFKA = "acks=all\nmessage.timeout.ms=8000\nenable.idempotence=false\n"


class FakeBatches:
    """batch.run_batch and report.data.run_outcomes: the RF 1 class fails leader-outage until RF 3 + min ISR 2."""

    def __init__(self, fails=lambda name: "rf1" in name and "leader-outage" in name and "fix-rf3" not in name):
        self.batches: list[tuple[str, list[str]]] = []
        self.fails = fails

    def run_batch(self, plan, batch_id, out=None):
        names = [r.name for r in plan.runs]
        self.batches.append((batch_id, names))
        summaries = [{"scenario": n, "run_id": f"run-{n}", "run_dir": str(out / f"run-{n}"), "error": None,
                      "report": str(out / f"run-{n}" / "report" / "index.html")} for n in names]
        return batch.BatchResult(batch_id, summaries, None)

    def run_outcomes(self, run_dir):
        if self.fails(Path(run_dir).name):
            return {"status": "failed", "counts": {"undelivered_attempts": 1234}, "first_wall": {
                "undelivered_attempts": 1.8e9 + 61}}
        return {"status": "passed", "counts": {}, "first_wall": {}}


@pytest.fixture
def faked(monkeypatch, tmp_path):
    import kafkaproof.cluster.discovery as discovery
    fake = FakeBatches()
    seen = {}

    def fake_discover(bootstrap, connection, topics=()):
        seen.update(bootstrap=bootstrap, topics=list(topics))
        return inventory(*THREE)
    monkeypatch.setattr(discovery, "discover", fake_discover)
    monkeypatch.setattr(batch, "run_batch", fake.run_batch)
    monkeypatch.setattr(report_data, "run_outcomes", lambda run_dir: fake.run_outcomes(run_dir))
    app = tmp_path / "producer.properties"
    app.write_text(LIBRDKAFKA)
    fake.app, fake.seen = app, seen
    return fake


def test_run_audit_runs_the_matrix_as_one_batch_then_proves_the_fix(faked, tmp_path):
    out = tmp_path / "audit"
    result = run_audit(AuditRequest(out=out, bootstrap="k1:9092", app_config=str(faked.app), app_format="librdkafka",
                                    faults=("leader-outage", "leader-kill"), max_classes=2))
    assert faked.seen == {"bootstrap": "k1:9092", "topics": []}
    ids = [b for b, _ in faked.batches]
    assert ids[0].endswith("/matrix") and ids[1:] == [ids[0][:-6] + "fix-1", ids[0][:-6] + "fix-2"]
    # the matrix: 2 classes x 2 faults, in FAULTS' order, one batch
    assert faked.batches[0][1] == ["audit-rf1-isr1-auto-leader-kill", "audit-rf1-isr1-auto-leader-outage",
                                   "audit-rf3-isr2-leader-kill", "audit-rf3-isr2-leader-outage"]
    # round 1: the first candidate on the failed fault; round 2: its confirmation on the other fault
    assert faked.batches[1][1] == ["audit-rf1-isr1-auto-leader-outage-fix-rf3-min-isr-2"]
    assert faked.batches[2][1] == ["audit-rf1-isr1-auto-leader-kill-fix-rf3-min-isr-2"]
    assert (out / "suite" / "fixes" / "audit-rf1-isr1-auto-leader-kill-fix-rf3-min-isr-2.yaml").exists()
    assert len(list((out / "suite").glob("audit-*.yaml"))) == 2 * len(FAULTS)  # the whole suite is written

    doc = json.loads((out / "audit.json").read_text())
    assert doc == result.audit and result.verdict == "fail" and result.exit_code == 1
    assert doc["kind"] == "kafkaproof-audit" and doc["schema"] == 1 and doc["audit_id"].startswith("audit-")
    assert set(doc) == {"kind", "schema", "audit_id", "started_wall", "finished_wall", "bootstrap", "verdict",
                        "exit_code", "errors", "inventory", "client_settings", "plan", "findings", "faults",
                        "suite_dir", "classes", "excluded"}
    assert list(doc["faults"]) == ["leader-kill", "leader-outage"] and doc["suite_dir"] == str(out / "suite")
    rf1, rf3 = doc["classes"]
    assert rf1["topics"] == ["events"] and rf3["topics"] == ["orders", "users"] and rf3["grouped"][0]["topic"] == "users"
    assert (rf1["verdict"], rf3["verdict"]) == ("fail", "pass")
    outage = rf1["runs"][1]
    assert outage["status"] == "failed" and outage["counts"] == {"undelivered_attempts": 1234}
    assert outage["report"] == "runs/run-audit-rf1-isr1-auto-leader-outage/report/index.html"  # relative to out
    assert rf1["fix"]["fixes"] == ["rf3", "min-isr-2"] and len(rf1["fix"]["runs"]) == 2
    assert rf1["fix"]["changes"][1].startswith("brokers' min.insync.replicas 2")
    assert [t["outcome"] for t in rf1["fixes_tried"]] == ["passed"]
    assert rf3["fix"] is None and rf3["fixes_tried"] == [] and doc["excluded"] == {
        "__consumer_offsets": doc["excluded"]["__consumer_offsets"]}
    assert result.html_path == out / "audit.html" and result.html_path.exists()
    text = "\n".join(result.lines)
    assert "events     FAIL  [rf1-isr1-auto] leader-outage: undelivered_attempts 1,234 (first 2027-01-15 08:01:01 UTC)" in text
    assert "orders     PASS  [rf3-isr2] no loss under leader-kill, leader-outage" in text
    assert "proven fix for rf1-isr1-auto (events): rf3+min-isr-2: brokers' default.replication.factor 3" in text
    assert result.lines[-1] == f"report: {out / 'audit.html'}"


def test_no_fixes_a_failed_confirmation_and_an_errored_run(faked, tmp_path):
    result = run_audit(AuditRequest(out=tmp_path / "a", bootstrap="k1:9092", faults=("leader-outage",), fixes=False))
    assert len(faked.batches) == 1 and result.audit["classes"][0]["fixes_tried"] == []
    assert any(line.startswith("no fix proven for rf1-isr1-auto") for line in result.lines)

    faked.batches.clear()
    faked.fails = lambda n: "rf1" in n and (("leader-outage" in n and "fix" not in n) or ("fix" in n and "kill" in n))
    result = run_audit(AuditRequest(out=tmp_path / "b", bootstrap="k1:9092", faults=("leader-kill", "leader-outage"),
                                    max_fix_tries=2))
    tried = result.audit["classes"][0]["fixes_tried"]
    assert [(t["fixes"], t["outcome"]) for t in tried] == [(["rf3", "min-isr-2"], "not confirmed"),
                                                             (["idempotence"], "not confirmed")]
    assert [len(t["runs"]) for t in tried] == [2, 2] and len(faked.batches) == 5  # matrix + 2 rounds per try
    assert result.audit["classes"][0]["fix"] is None

    faked.fails = lambda name: False
    original = faked.run_outcomes
    faked.run_outcomes = lambda d: ({"status": "error", "counts": {}, "first_wall": {}} if "users" in d or "compact" in d
                                    else original(d))
    result = run_audit(AuditRequest(out=tmp_path / "c", bootstrap="k1:9092", faults=("isolate",)))
    assert result.verdict == "error" and result.exit_code == 2
    assert result.audit["errors"] == ["rf3-isr2-compact isolate: error"]
    assert [c["verdict"] for c in result.audit["classes"]] == ["pass", "pass", "error"]


def test_bad_input_is_refused_before_any_replica(faked, tmp_path, monkeypatch):
    import kafkaproof.cluster.discovery as discovery
    with pytest.raises(Exception, match="no such fault of the audit's matrix"):
        run_audit(AuditRequest(out=tmp_path, bootstrap="k1:9092", faults=("meteor",)))

    def refused(*a, **k):
        raise ClusterError("DescribeConfigs (topics) on the cluster at k1:9092 was refused (TOPIC_AUTHORIZATION_FAILED)")
    monkeypatch.setattr(discovery, "discover", refused)
    with pytest.raises(ClusterError, match="TOPIC_AUTHORIZATION_FAILED"):
        run_audit(AuditRequest(out=tmp_path, bootstrap="k1:9092"))
    bad = tmp_path / "bad.properties"
    bad.write_text("acks=all\nno.such.property=1\n")
    monkeypatch.setattr(discovery, "discover", lambda *a, **k: inventory(*THREE))
    with pytest.raises(Exception, match="no.such.property"):
        run_audit(AuditRequest(out=tmp_path / "x", bootstrap="k1:9092", app_config=str(bad), app_format="librdkafka"))
    assert faked.batches == []


# --- the CLI -------------------------------------------------------------------------------------

def test_cli_runs_the_audit_prints_the_lines_and_exits_with_the_verdict(faked, tmp_path, capsys):
    out = tmp_path / "audit"
    code = cli.main(["audit", "--bootstrap", "k1:9092", "--app-config", str(faked.app), "--app-format", "librdkafka",
                     "--out", str(out), "--faults", "leader-outage", "--max-classes", "2", "--max-fix-tries", "1",
                     "--topics", "events,orders"])
    printed = capsys.readouterr().out
    assert code == 1 and faked.seen["topics"] == ["events", "orders"]
    assert "FAIL  [rf1-isr1-auto] leader-outage: undelivered_attempts 1,234" in printed
    assert "proven fix for rf1-isr1-auto (events): rf3+min-isr-2" in printed and f"report: {out}/audit.html" in printed


def test_cli_argument_errors(tmp_path, capsys):
    assert cli.main(["audit", "--bootstrap", "k1:9092"]) == 2
    assert "--out DIR" in capsys.readouterr().err
    assert cli.main(["audit", "--bootstrap", "k1:9092", "--out", str(tmp_path), "--faults", "leader-kill,meteor"]) == 2
    assert "--faults meteor: no such fault" in capsys.readouterr().err
    assert cli.main(["audit", "--out", str(tmp_path)]) == 2
    assert "name the cluster with --bootstrap" in capsys.readouterr().err
    for bad in (["--max-fix-tries", "0"], ["--max-classes", "-1"]):
        with pytest.raises(SystemExit) as e:
            cli.main(["audit", "--bootstrap", "k1:9092", "--out", str(tmp_path), *bad])
        assert e.value.code == 2
    assert "not built" not in cli.AUDIT_HELP and not hasattr(cli, "AUDIT_NOT_BUILT") and audit.VERDICT_EXIT["error"] == 2


# --- run_outcomes --------------------------------------------------------------------------------

def test_run_outcomes_counts_distinct_values_and_first_wall_times(tmp_path):
    run = tmp_path / "run-1"
    (run / "analysis").mkdir(parents=True)
    (run / "validation").mkdir()
    t0, wall0 = 5_000_000_000, 1_800_000_000_000_000_000
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "status": "complete", "clock": {
        "monotonic_origin_ns": t0, "wall_origin_ns": wall0}}))
    (run / "validation" / "result.json").write_text(json.dumps({"status": "fail", "rows": []}))
    pd.DataFrame({"kind": ["lost", "lost", "lost", "redeliveries", "redeliveries", "undelivered_attempts"],
                  "value_id": ["v1", "v1", "v2", None, None, "v9"],
                  "t_start_ns": [t0 + 9_000_000_000, t0 + 7_500_000_000, t0 + 8_000_000_000, t0 + 20_000_000_000,
                                 None, t0 + 12_000_000_000]}).to_parquet(run / "analysis" / "anomalies.parquet")
    got = report_data.run_outcomes(run)
    assert got["status"] == "failed"
    assert got["counts"] == {"lost": 2, "redeliveries": 2, "undelivered_attempts": 1}  # distinct values
    assert got["first_wall"] == {"lost": 1.8e9 + 7.5, "redeliveries": 1.8e9 + 20, "undelivered_attempts": 1.8e9 + 12}
    assert list(got["counts"]) == [k for k in report_data.KINDS if k in got["counts"]]
    (run / "analysis" / "anomalies.parquet").unlink()
    (run / "analysis" / "metrics.json").write_text(json.dumps({"counts": {"lost": 0, "duplicates": 3}}))
    assert report_data.run_outcomes(run) == {"status": "failed", "counts": {"duplicates": 3}, "first_wall": {}}
    assert report_data.run_outcomes(None) == {"status": "error", "counts": {}, "first_wall": {}}
    assert report_data.run_outcomes(tmp_path / "nothing")["status"] == "error"
