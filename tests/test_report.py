"""HTML reports (kafkaproof.report): golden run directories rendered and checked for their content.

The golden run mirrors `e4-unclean-election-on`: a follower is isolated while the leader
acknowledges alone, then the leader is killed and the stale follower is elected. 300
acknowledged values are lost, their offsets reused by later values. The analysis and
validation outputs are written by hand in the formats of spark/analyze.py and
kafkaproof/validation.py (the `spark` test produces them for real).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafkaproof import history, report
from kafkaproof.ledger import make_value_id, write_manifest, write_table

T0 = 10_000_000_000_000
WALL0 = 1_795_000_000_000_000_000
NS = 1_000_000_000
RATE, START_S, END_S = 100, 5.0, 25.0
LOST = range(400, 700)          # seqs acked while the leader was alone, then truncated away
INDEFINITE = range(700, 1000)   # sent while no leader was reachable: timed out
FAULTS = [("isolate-1", "isolate", "follower:0", [2], 8.0, 14.0),
          ("kill-1", "kill", "leader:0", [1], 12.0, 26.0)]
EXPLANATION = ("A negative control that must lose acknowledged data. The follower is cut off and drops out of "
               "the ISR while the leader alone acknowledges writes. Then the leader dies.")


def ns(s: float) -> int:
    return T0 + round(s * NS)


# --------------------------------------------------------------------------- golden run


def sends_rows() -> list[dict]:
    """2,000 sends at 100/s from 5 s: 300 lost (acked, truncated), 300 indefinite, the rest acked and kept."""
    rows = []
    for seq in range(int((END_S - START_S) * RATE)):
        t = START_S + seq / RATE
        latency = 0.8 if 15.0 <= t < 16.0 else 0.005
        row = {"value_id": make_value_id(0, seq), "producer": 0, "producer_pid": 4242, "seq": seq,
               "key": f"k{seq % 50}", "partition": 0, "intended_ns": ns(t), "send_ns": ns(t),
               "complete_ns": ns(t + latency), "outcome": "ok", "offset": None, "error_code": None,
               "error_name": None, "txn_id": None, "txn_outcome": None}
        if seq in INDEFINITE:
            row.update(outcome="indefinite", complete_ns=ns(t + 5.0), error_code=-192, error_name="_MSG_TIMED_OUT")
        else:
            row["offset"] = seq if seq < 700 else seq - 600  # the new leader continues from offset 400
        rows.append(row)
    return rows


def in_log(row: dict) -> bool:
    return row["outcome"] == "ok" and row["seq"] not in LOST


def audit_rows(sends: list[dict]) -> list[dict]:
    return [{"isolation": iso, "partition": 0, "offset": r["offset"], "key": r["key"], "value_id": r["value_id"],
             "timestamp_ms": r["send_ns"] // 1_000_000} for iso in ("read_committed", "read_uncommitted")
            for r in sends if in_log(r)]


def fault_rows() -> list[dict]:
    return [{"fault_id": fid, "kind": kind, "target": target, "nodes": nodes, "params": "{}",
             "start_ns": ns(a), "heal_ns": ns(b), "start_wall": "2026-11-22T02:00:08+00:00",
             "heal_wall": "2026-11-22T02:00:14+00:00"} for fid, kind, target, nodes, a, b in FAULTS]


def snapshot_rows() -> list[dict]:
    rows = []
    for i in range(24):
        t = 4.3 + i
        leader = 1 if t < 15 else 2
        isr = [1, 2] if t < 9 else [1] if t < 15 else [2] if t < 26 else [2, 1]
        live = [2, 101] if 12 <= t < 26 else [1, 2, 101]
        rows.append({"ts_ns": ns(t), "partition": 0, "leader": leader, "replicas": [1, 2], "isr": isr,
                     "controller": 101, "live_nodes": live})
    return rows


def scenario(expect_detect: bool, explanation: str = EXPLANATION) -> dict:
    return {
        "name": "golden-unclean", "description": "E4: unclean leader election with a lagging follower.",
        "explanation": explanation, "guarantee": "at-least-once",
        "expect": {"detect": ["lost"], "why": "the stale replica truncates acknowledged writes"} if expect_detect
        else "pass",
        "cluster": {"brokers": 2, "controllers": 1, "kafka_version": "4.3.1", "config": {}, "node_config": {}},
        "topic": {"name": "kp-golden", "partitions": 1, "replication_factor": 2, "create": True,
                  "config": {"min.insync.replicas": 1, "unclean.leader.election.enable": True}},
        "producers": {"count": 1, "rate": RATE, "duration_s": 20, "config": {"acks": "all"}, "value_size": 100},
        "consumers": {"count": 0, "mode": "subscribe", "commit": "sync", "isolation_level": "read_committed",
                      "processing_ms": 0, "config": {}},
        "faults": [{"at": 3, "kind": "isolate", "target": "follower:0", "duration": 6},
                   {"at": 7, "kind": "kill", "target": "leader:0"}],
        "tags": ["nightly", "e4"],
    }


def timings() -> dict:
    phases = [("provision", 0, 3), ("create_topic", 3, 4), ("workload", 4, 25), ("heal", 25, 26),
              ("settle", 26, 26.5), ("drain", 26.5, 27.5), ("teardown", 27.5, 28), ("assemble", 28, 28.2)]
    return {n: {"start_ns": ns(a), "end_ns": ns(b), "seconds": b - a, "start_wall": "", "end_wall": ""}
            for n, a, b in phases}


def manifest(run_id: str, expect_detect: bool, status: str = "complete", error: str | None = None,
             explanation: str = EXPLANATION) -> dict:
    scn = scenario(expect_detect, explanation)
    nodes = [{"id": i, "roles": r, "address": f"10.77.9.{a}:{p}", "namespace": f"kp9n{i}", "state": "running",
              "alive": True, "paused": False, "pid": 100 + i} for i, r, a, p in
             ((1, "broker", 2, 9092), (2, "broker", 6, 9092), (101, "controller", 10, 9093))]
    return {
        "run_id": run_id, "scenario_name": scn["name"], "scenario": scn, "scenario_hash": "abc123",
        "scenario_path": "scenarios/golden-unclean.yaml", "guarantee": "at-least-once",
        "expect": {"outcome": "detect", "detect": ["lost"]} if expect_detect else {"outcome": "pass", "detect": []},
        "versions": {"kafka": "4.3.1", "librdkafka": "2.16.0", "confluent_kafka": "2", "python": "3.11.7",
                     "kafkaproof": "0.1.0"},
        "clock": {"monotonic_origin_ns": T0, "wall_origin_ns": WALL0, "source": "CLOCK_MONOTONIC", "unit": "ns"},
        "timings": timings(), "status": status, "error": error, "fault_errors": [],
        "topic": "kp-golden", "bootstrap": "10.77.9.2:9092,10.77.9.6:9092", "host": {"hostname": "vm", "cpus": 2},
        "cluster": {"nodes": nodes, "cluster_id": "golden-cluster", "network": "netns", "active_controller": 101},
        "audit": {"partitions": {"0": {"low": 0, "high": 1400, "complete": True}}},
        "topic_description": {"topic": "kp-golden", "partitions": {"0": {"leader": 1, "replicas": [1, 2],
                                                                          "isr": [1, 2]}}},
        "counts": {"sends": 2000, "audit": 2800, "faults": 2, "cluster_snapshots": 24, "reads": 0,
                   "consumer_events": 0},
    }


def active(t0_ns: int, t1_ns: int) -> list[tuple[str, str, str]]:
    return [(fid, kind, target) for fid, kind, target, _, a, b in FAULTS if ns(a) <= t1_ns and ns(b) >= t0_ns]


def anomaly_rows(sends: list[dict]) -> list[dict]:
    """lost, inconsistent_offsets and ack_offset_mismatch rows as spark/analyze.py writes them."""
    by_offset = {r["offset"]: r for r in sends if in_log(r)}
    rows = []
    for r in sends:
        if r["seq"] not in LOST:
            continue
        y = by_offset[r["offset"]]
        faults = active(r["send_ns"], r["complete_ns"])
        base = {"value_id": r["value_id"], "producer": 0, "partition": 0, "offset": r["offset"],
                "offsets": [r["offset"]], "consumer": None, "consumer_pid": None, "group": None,
                "t_start_ns": r["send_ns"], "t_end_ns": r["complete_ns"], "t_s": (r["send_ns"] - T0) / NS,
                "fault_ids": [f[0] for f in faults], "fault_kinds": [f[1] for f in faults],
                "fault_targets": [f[2] for f in faults]}
        rows.append({**base, "kind": "lost", "value_ids": None,
                     "detail": f"acked (acks=-1) at partition 0 offset {r['offset']}; absent from the committed log"})
        rows.append({**base, "kind": "inconsistent_offsets", "value_ids": [r["value_id"], y["value_id"]],
                     "detail": f"partition 0 offset {r['offset']} holds 2 different values across acks, reads and the log"})
        rows.append({**base, "kind": "ack_offset_mismatch", "value_ids": [r["value_id"], y["value_id"]],
                     "detail": f"acked value {r['value_id']} at partition 0 offset {r['offset']}, but the log holds "
                               f"value {y['value_id']} there"})
    return rows


ANOMALY_SCHEMA = pa.schema([
    ("kind", pa.string()), ("value_id", pa.int64()), ("producer", pa.int32()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("offsets", pa.list_(pa.int64())), ("value_ids", pa.list_(pa.int64())),
    ("consumer", pa.int32()), ("consumer_pid", pa.int32()), ("group", pa.string()), ("t_start_ns", pa.int64()),
    ("t_end_ns", pa.int64()), ("detail", pa.string()), ("t_s", pa.float64()), ("fault_ids", pa.list_(pa.string())),
    ("fault_kinds", pa.list_(pa.string())), ("fault_targets", pa.list_(pa.string())),
])
TIMESERIES_SCHEMA = pa.schema([
    ("second", pa.int64()), ("attempted", pa.int64()), ("acked", pa.int64()), ("failed", pa.int64()),
    ("indefinite", pa.int64()), ("ok_ratio", pa.float64()), ("acks_completed", pa.int64()),
    ("errors_completed", pa.int64()), ("reads", pa.int64()), ("publish_p99_ms", pa.float64()),
    ("consumer_lag", pa.int64()), ("unavailable", pa.bool_()), ("active_faults", pa.list_(pa.string())),
])


def timeseries_rows(sends: list[dict]) -> list[dict]:
    rows = []
    for s in range(0, 26):
        intended = [r for r in sends if s <= (r["intended_ns"] - T0) / NS < s + 1]
        done = [r for r in sends if s <= (r["complete_ns"] - T0) / NS < s + 1]
        ok = [r for r in intended if r["outcome"] == "ok"]
        lat = sorted((r["complete_ns"] - r["send_ns"]) / 1e6 for r in ok)
        acks_done = sum(r["outcome"] == "ok" for r in done)
        rows.append({"second": s, "attempted": len(intended), "acked": len(ok),
                     "failed": 0, "indefinite": sum(r["outcome"] == "indefinite" for r in intended),
                     "ok_ratio": len(ok) / len(intended) if intended else None, "acks_completed": acks_done,
                     "errors_completed": len(done) - acks_done, "reads": 0,
                     "publish_p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
                     "consumer_lag": None, "unavailable": bool(intended) and acks_done == 0,
                     "active_faults": [f[0] for f in active(ns(s), ns(s + 1) - 1)]})
    return rows


KIND_CLASSES = {"lost": "hard", "lost_unconfirmed": "soft", "unseen": "incomplete", "not_delivered": "soft",
                "duplicates": "soft", "redeliveries": "soft", "aborted_reads": "hard", "dirty_reads": "soft",
                "indefinite_landed": "info", "inconsistent_offsets": "hard", "ack_offset_mismatch": "hard",
                "reordering": "soft", "poll_skips": "soft", "poll_rewinds": "soft", "unknown_values": "hard",
                "undelivered_attempts": "soft"}


def metrics(anomalies: list[dict]) -> dict:
    counts = {k: sum(a["kind"] == k for a in anomalies) for k in KIND_CLASSES}
    return {
        "analysis_version": 1, "run_id": "golden", "t0_ns": T0, "end_s": 26.0, "kinds": list(KIND_CLASSES),
        "counts": counts,
        "examples": {k: sorted(a["value_id"] for a in anomalies if a["kind"] == k)[:10] for k in KIND_CLASSES},
        "outcomes": {"sent": 2000, "acked": 1700, "failed": 0, "indefinite": 300, "consumed": 0, "in_log": 1400,
                     "in_log_uncommitted": 1400, "expected": 1700, "log_records": 1400, "foreign_records": 0,
                     "log_records_committed": 1400, "reads": 0},
        "complete": True, "partitions": [{"partition": 0, "low": 0, "high": 1400, "complete": True}],
        "has_consumers": False, "groups": ["default"],
        "latency_ms": {"publish": {"count": 1700, "p50": 5.0, "p95": 800.0, "p99": 800.0, "p999": 800.0, "max": 800.0},
                       "publish_delay": {"count": 2000, "p50": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0},
                       "end_to_end": {"count": 0, "p50": None, "p95": None, "p99": None, "p999": None, "max": None}},
        "latency_ms_by_fault": {
            "(none)": {"publish": {"count": 1000, "p50": 5.0, "p95": 5.0, "p99": 800.0, "p999": 800.0, "max": 800.0}},
            "isolate-1": {"publish": {"count": 300, "p50": 5.0, "p95": 5.0, "p99": 5.0, "p999": 5.0, "max": 5.0}},
            "kill-1": {"publish": {"count": 1000, "p50": 5.0, "p95": 800.0, "p99": 800.0, "p999": 800.0, "max": 800.0}}},
        "availability": {"attempted": 2000, "acked": 1700, "ok_ratio": 0.85, "seconds_with_attempts": 20,
                         "seconds_unavailable": 3, "unavailability_windows": [{"start_s": 12, "end_s": 14, "seconds": 3}]},
        "faults": [
            {"fault_id": "isolate-1", "kind": "isolate", "target": "follower:0", "start_s": 8.0, "heal_s": 14.0,
             "errors": 0, "acks": 400, "time_to_first_error_ms": None, "last_error_s": None, "acks_resume_ms": None,
             "recovery_after_heal_ms": None, "max_ack_gap_ms": 10.0, "max_consumer_lag": None},
            {"fault_id": "kill-1", "kind": "kill", "target": "leader:0", "start_s": 12.0, "heal_s": 26.0,
             "errors": 300, "acks": 1000, "time_to_first_error_ms": 5000.0, "last_error_s": 19.99,
             "acks_resume_ms": 8005.0, "recovery_after_heal_ms": None, "max_ack_gap_ms": 3005.0,
             "max_consumer_lag": None}],
        "unhealed_faults": [], "job_seconds": 12.0,
    }


def validation_result(run_dir: Path, counts: dict, expect_detect: bool) -> dict:
    """validation/result.json as kafkaproof.validation writes it (negative control, or a plain at-least-once run)."""
    allowed_alo = {"duplicates", "redeliveries", "poll_rewinds", "reordering"}
    rows = []
    for kind, cls in KIND_CLASSES.items():
        n = counts.get(kind, 0)
        if cls == "incomplete":
            allowed, ok = False, n == 0
        elif expect_detect:
            allowed, ok = True, (n > 0) if kind == "lost" else True
        else:
            allowed = kind in allowed_alo or cls == "info"
            ok = allowed or n == 0
        rows.append({"anomaly": kind, "count": n, "allowed": allowed, "expected_detected": expect_detect and kind == "lost",
                     "ok": ok, "cls": cls, "summary": f"{kind} summary", "examples": []})
    success = all(r["ok"] for r in rows)
    docs = run_dir / "validation" / "data_docs" / "index.html"
    return {"run_dir": str(run_dir), "success": success, "status": "pass" if success else "fail",
            "guarantee": "at-least-once", "expect": {"outcome": "detect", "detect": ["lost"]} if expect_detect
            else {"outcome": "pass", "detect": []}, "rows": rows, "errors": [],
            "suites": {"kafkaproof.counts.x": success}, "data_docs": str(docs)}


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def make_run(root: Path, name: str = "golden-unclean-20261122T020000Z-0001", *, expect_detect: bool = True,
             analysis: bool = True, validation: bool = True, explanation: str = EXPLANATION) -> Path:
    """Write the golden run directory (ledger, logs, and optionally analysis and validation outputs)."""
    rd = root / name
    sends = sends_rows()
    write_table(rd, "sends", sends)
    write_table(rd, "audit", audit_rows(sends))
    write_table(rd, "faults", fault_rows())
    write_table(rd, "cluster_snapshots", snapshot_rows())
    write_table(rd, "reads", [])
    write_table(rd, "consumer_events", [])
    write_manifest(rd, manifest(name, expect_detect, explanation=explanation))
    (rd / "logs").mkdir()
    for n in (1, 2, 101):
        (rd / "logs" / f"node-{n}.log").write_text(f"[broker {n}] started\n")
    anomalies = anomaly_rows(sends)
    m = metrics(anomalies)
    if analysis:
        write_parquet(rd / "analysis" / "anomalies.parquet", anomalies, ANOMALY_SCHEMA)
        write_parquet(rd / "analysis" / "timeseries.parquet", timeseries_rows(sends), TIMESERIES_SCHEMA)
        (rd / "analysis" / "metrics.json").write_text(json.dumps(m, indent=2))
    if validation:
        docs = rd / "validation" / "data_docs"
        docs.mkdir(parents=True)
        (docs / "index.html").write_text("<html>data docs</html>")
        (rd / "validation" / "result.json").write_text(json.dumps(validation_result(rd, m["counts"], expect_detect)))
    return rd


@pytest.fixture
def history_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'history.sqlite'}"


def text_of(html_text: str) -> str:
    """Visible text, tags stripped and whitespace collapsed (for sentence checks)."""
    import html as h
    return re.sub(r"\s+", " ", h.unescape(re.sub(r"<[^>]+>", " ", html_text)))


def section(html_text: str, anchor: str) -> str:
    """The HTML of the element with id `anchor`: a <section>, or a heading up to the next h2."""
    start = html_text.index(f'id="{anchor}"')
    opening = html_text.rindex("<", 0, start)
    if html_text.startswith("<section", opening):
        return html_text[opening:html_text.index("</section>", start)]
    end = html_text.find("<h2", start)
    return html_text[opening:end if end > 0 else None]


# --------------------------------------------------------------------------- run report


@pytest.mark.unit
def test_run_report_negative_control(tmp_path, history_url):
    rd = make_run(tmp_path)
    path = report.write_run_report(rd, examples=3, history_url=history_url)
    assert path == rd / "report" / "index.html"
    page = path.read_text()
    text = text_of(page)
    # verdict first: status, guarantee, the control's outcome in one sentence with its count
    verdict = section(page, "verdict")
    assert "PASS" in verdict and "negative control" in verdict
    assert "Expected anomaly detected (lost): 300 acknowledged values were lost: they are not in the log after " \
           "the faults healed." in text_of(verdict)
    assert "Also found (not decisive in a negative control): 300 offsets hold different values" in text_of(verdict)
    assert page.index('id="verdict"') < page.index('id="timeline"') < page.index('id="anomalies"')
    assert EXPLANATION in text
    # timeline: the chart with both fault bands labelled, leader change and ISR states
    assert '<svg class="timeline"' in page
    assert "isolate follower:0 → node 2" in text and "kill leader:0 → node 1" in text
    assert page.count('class="fault-band"') == 2
    assert 'class="leader-change"' in page and "L1 ISR 1,2 → L1 ISR 1" in text and "L2 ISR 2" in text
    assert "analysis/timeseries.parquet" in text
    # anomalies: counts, when, share during faults, 3 examples each with partition, offsets, time and fault
    anomalies = section(page, "anomalies")
    assert re.search(r"<code>lost</code></td><td class=\"num\">300</td>", anomalies)
    lost_examples = anomalies[anomalies.index("lost: 300 — examples"):anomalies.index("inconsistent_offsets: 300 —")]
    assert lost_examples.count("<tr>") == 1 + 3
    assert "400 (p0 #400)" in lost_examples and "9.00 s" in lost_examples and "isolate follower:0" in lost_examples
    assert "Checked and not found: lost_unconfirmed, unseen" in text_of(anomalies)
    # outcomes, errors, recovery, latency
    assert re.search(r"acked</td><td class=\"num\">1,700</td>", page)
    assert re.search(r"_MSG_TIMED_OUT</code></td><td>indefinite</td><td class=\"num\">300</td>", page)
    recovery = text_of(section(page, "recovery"))
    assert "kill leader:0 → node 1" in recovery and "5,000.0 ms" in recovery and "8,005.0 ms" in recovery
    assert "Seconds with sends but no ack: 3 of 20" in recovery
    latency = text_of(section(page, "latency"))
    assert "publish (send → ack) 1,700 5.00 ms 800.0 ms 800.0 ms" in latency
    assert "no fault active" in latency
    # scenario, versions, cluster, files
    assert "unclean.leader.election.enable" in section(page, "scenario")
    cluster = text_of(section(page, "cluster"))
    assert "10.77.9.10:9093" in cluster and "controller" in cluster and "librdkafka 2.16.0" in cluster
    files = section(page, "files")
    for href in ("../sends.parquet", "../manifest.json", "../logs/node-101.log", "../analysis/metrics.json",
                 "../validation/result.json", "../validation/data_docs/index.html"):
        assert f'href="{href}"' in files
        assert (path.parent / href).resolve().exists()
    # trend: the history store is empty
    assert "history store is empty" in text_of(section(page, "trend"))
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.unit
def test_run_report_violation_in_plain_sentences(tmp_path, history_url):
    rd = make_run(tmp_path, expect_detect=False)
    page = report.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "FAIL: at-least-once violated" in verdict
    assert "300 acknowledged values were lost: they are not in the log after the faults healed." in verdict
    assert "300 acknowledgements named offsets where the log holds another value or none." in verdict
    assert '<section class="verdict fail"' in page
    lost = section(page, "anomalies")
    assert lost.count("(p0 #") >= 10  # default: 10 examples per kind


@pytest.mark.unit
def test_run_report_without_analysis_uses_the_ledger(tmp_path, history_url):
    rd = make_run(tmp_path, analysis=False, validation=False)
    page = report.write_run_report(rd, history_url=history_url).read_text()
    text = text_of(page)
    assert "NOT JUDGED" in text_of(section(page, "verdict"))
    assert "no analysis (analysis/metrics.json)" in text and "no validation result" in text
    assert "sends.parquet and reads.parquet (no analysis)" in text
    assert 'class="series-acks"' in page and 'class="series-p99"' in page
    assert re.search(r"acked</td><td class=\"num\">1,700</td>", page)
    assert re.search(r"in log</td><td class=\"num\">1,400</td>", page)
    assert "Not analysed" in text_of(section(page, "anomalies"))
    # recovery recomputed from sends.parquet: first error 5 s after the kill
    assert "5,000.0 ms" in text_of(section(page, "recovery"))


@pytest.mark.unit
def test_run_report_of_a_run_that_ended_in_error(tmp_path, history_url):
    rd = tmp_path / "broken-run"
    write_manifest(rd, {**manifest("broken-run", False, status="error",
                                   error="faults could not be injected: isolate: nft failed"), "counts": None})
    page = report.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "ERROR: run error" in verdict
    assert "faults could not be injected: isolate: nft failed" in verdict
    assert "ledger table sends.parquet is missing" in text_of(page)
    assert "no sends or reads recorded" in page
    assert "sends.parquet (missing)" in text_of(page)


@pytest.mark.unit
def test_run_report_without_manifest(tmp_path, history_url):
    rd = tmp_path / "empty"
    rd.mkdir()
    page = report.write_run_report(rd, history_url=history_url).read_text()
    assert "ERROR: no run manifest" in page and "not a kafkaproof run directory" in page


@pytest.mark.unit
def test_everything_from_data_is_escaped(tmp_path, history_url):
    evil = "<script>alert('x')</script> & <b>bold</b>"
    rd = make_run(tmp_path, explanation=evil)
    faults = fault_rows()
    faults[0]["target"] = "<img src=x onerror=alert(1)>"
    write_table(rd, "faults", faults)
    page = report.write_run_report(rd, history_url=history_url).read_text()
    assert "<script" not in page and "<img" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.unit
def test_trend_from_history(tmp_path, history_url):
    rd = make_run(tmp_path)
    t = datetime(2026, 11, 1, 2, tzinfo=timezone.utc)
    for i in range(4):
        history.record({"scenario": "golden-unclean", "run_id": f"golden-unclean-old{i}", "batch_id": f"night-{i}",
                        "kafka_version": "4.3.1", "verdict": "pass" if i != 2 else "fail", "status": "complete",
                        "finished_at": t + timedelta(days=i),
                        "metrics": {"recovery_s": 3.0 + i, "publish_p99_ms": 40.0 + i, "unavailable_s": 1.0,
                                    "anomalies": {"lost": 250 + i}, "outcomes": {}}}, url=history_url)
    page = report.write_run_report(rd, history_url=history_url).read_text()
    trend = section(page, "trend")
    assert trend.count('<svg class="trend"') == 3
    assert "golden-unclean-old3" in trend and "(this run)" in trend
    assert "lost=253" in trend
    # oldest first in the charts: the first point is old0's recovery (3 s), this run is ringed
    assert 'stroke="#000"' in trend


# --------------------------------------------------------------------------- pure shaping


@pytest.mark.unit
def test_anomaly_sentences_one_and_many():
    assert report.anomaly_sentence("lost", 1) == "1 acknowledged value was lost: it is not in the log after the faults healed."
    assert report.anomaly_sentence("lost", 1490) == \
        "1,490 acknowledged values were lost: they are not in the log after the faults healed."
    assert report.anomaly_sentence("duplicates", 2) == "2 values are in the log more than once."
    assert "brand_new" in report.anomaly_sentence("brand_new", 3)
    assert set(report.KINDS) == set(KIND_CLASSES)  # every kind the analysis counts has a sentence


@pytest.mark.unit
def test_attribution_text_names_the_faults_behind_a_kind():
    metrics = {"attribution": {"unacknowledged_writes": 4, "unacknowledged_records": 9, "kinds": {
        "duplicates": {"attributed": 9, "unattributed": 2, "by_fault": {"lost_ack-1": 9}}}}}
    text = report.attribution_text(metrics, "duplicates")
    assert "9 by fault lost_ack-1" in text and "4 such writes, 9 records" in text
    assert "not explained by a proxy action: 2" in text
    assert report.attribution_text(metrics, "lost") is None
    no_proxy = {"attribution": {"unacknowledged_writes": 0, "kinds": {"duplicates": {"unattributed": 3}}}}
    assert report.attribution_text(no_proxy, "duplicates") is None and report.attribution_text(None, "x") is None


@pytest.mark.unit
def test_build_verdict_cases():
    m = manifest("r", expect_detect=True)
    counts = {"lost": 0}
    undetected = report.build_verdict(m, {"status": "fail", "rows": [
        {"anomaly": "lost", "count": 0, "ok": False, "expected_detected": True}], "errors": []}, counts)
    assert undetected.status == "fail"
    assert any("NOT detected" in text and cls == "bad" for cls, text in undetected.lines)
    incomplete = report.build_verdict({**m, "status": "incomplete", "error": "interrupted (SIGTERM)"}, None, None)
    assert incomplete.status == "error" and "interrupted (SIGTERM)" in incomplete.lines[0][1]
    unjudged = report.build_verdict(manifest("r", False), {"status": "error", "rows": [],
                                                            "errors": ["final drain incomplete for partition(s) 1"]}, {})
    assert unjudged.status == "error" and "final drain incomplete" in unjudged.lines[0][1]
    allowed = report.build_verdict(manifest("r", False), {"status": "pass", "errors": [], "rows": [
        {"anomaly": "duplicates", "count": 2, "ok": True, "allowed": True, "cls": "soft"},
        {"anomaly": "indefinite_landed", "count": 1, "ok": True, "allowed": True, "cls": "info"}]}, None)
    assert allowed.headline == "PASS: at-least-once held"
    assert ("info", "Allowed under at-least-once: 2 values are in the log more than once.") in allowed.lines
    assert any(text.startswith("For information: 1 send") for _, text in allowed.lines)


@pytest.mark.unit
def test_per_second_from_ledger_counts_by_completion_time():
    import pandas as pd
    sends = pd.DataFrame(sends_rows())
    sec = report.per_second_from_ledger(sends, None, T0).set_index("second")
    assert sec.loc[6, "attempted"] == 100 and sec.loc[6, "acks"] == 100 and sec.loc[6, "errors"] == 0
    assert sec.loc[13, "acks"] == 0 and bool(sec.loc[13, "unavailable"])
    assert sec.loc[18, "errors"] == 100  # indefinite sends of 13 s time out 5 s later
    assert sec.loc[15, "p99_ms"] == pytest.approx(800, abs=1)
    assert int(sec["acks"].sum()) == 1700 and int(sec["errors"].sum()) == 300


@pytest.mark.unit
def test_partition_segments_and_changes():
    import pandas as pd
    segs = report.partition_segments(pd.DataFrame(snapshot_rows()), T0)[0]
    assert [s.label for s in segs] == ["L1 ISR 1,2", "L1 ISR 1", "L2 ISR 2", "L2 ISR 2,1"]
    assert [s.state for s in segs] == ["ok", "shrunk", "shrunk", "ok"]
    changes = report.cluster_changes({0: segs})
    assert [round(c.t_s, 1) for c in changes] == [9.3, 15.3, 26.3]
    assert [c.leader_changed for c in changes] == [False, True, False]
    nodes = report.node_segments(pd.DataFrame(snapshot_rows()), T0, [1, 2, 101])
    assert [(s.state, round(s.start_s, 1)) for s in nodes[1]] == [("up", 4.3), ("down", 12.3), ("up", 26.3)]


@pytest.mark.unit
def test_batch_helpers():
    assert report.safe_batch_id("kafka_reliability_nightly/scheduled__2026-11-22T02:00:00+00:00").startswith(
        "kafka_reliability_nightly_scheduled__2026-11-22T02_00_00_00_00-")
    assert report.safe_batch_id("night-1") == "night-1"
    assert report.safe_batch_id("../../etc") != "../../etc" and "/" not in report.safe_batch_id("../../etc")
    assert report.change_since(None, "pass") == ("first run", "same")
    assert report.change_since("pass", "fail")[0].startswith("NEW FAILURE")
    assert report.change_since("fail", "pass") == ("fixed (was fail)", "better")
    assert report.change_since("fail", "fail")[0] == "still failing"
    rows = [{"run_id": "c", "batch_id": "b2"}, {"run_id": "x", "batch_id": "b2"}, {"run_id": "b", "batch_id": "b1"},
            {"run_id": "a", "batch_id": "b0"}]
    assert report.pick_previous(rows, "b2", {"c"}, "c")["run_id"] == "b"
    assert report.pick_previous(rows, "b1", {"b"}, "b")["run_id"] == "a"
    assert report.pick_previous(rows, "b0", {"a"}, "a") is None
    assert report.nice_ticks(0, 7, 4) == [0, 2, 4, 6]
    assert report.place_labels([(0, 50), (20, 80), (60, 90), (100, 120)]) == [0, 1, 0, 0]


# --------------------------------------------------------------------------- batch pages


def summary(scenario: str, verdict: str, run_dir: Path | None, **kw) -> dict:
    s = {"scenario": scenario, "run_id": run_dir.name if run_dir else None, "run_dir": str(run_dir) if run_dir else None,
         "verdict": verdict, "guarantee": "at-least-once", "expect": "pass", "kafka_version": "4.3.1",
         "violations": [], "regressions": [], "error": None,
         "report": str(run_dir / "report" / "index.html") if run_dir else None,
         "metrics": {"recovery_s": 2.5, "publish_p99_ms": 45.0, "anomalies": {"lost": 0}}, "label": ""}
    s.update(kw)
    return s


@pytest.mark.unit
def test_batch_report_with_change_since_previous_batch(tmp_path, history_url):
    runs = tmp_path / "runs"
    dirs = {}
    for name in ("a-passes", "b-breaks", "c-fixed", "d-error"):
        dirs[name] = make_run(runs, f"{name}-20261122T020000Z-0001")
        report.write_run_report(dirs[name], history_url=history_url)
    t = datetime(2026, 11, 21, 2, tzinfo=timezone.utc)
    for name, verdict in (("a-passes", "pass"), ("b-breaks", "pass"), ("c-fixed", "fail")):
        history.record({"scenario": name, "run_id": f"{name}-prev", "batch_id": "nightly/2026-11-21",
                        "verdict": verdict, "finished_at": t, "metrics": {}}, url=history_url)
        history.record({"scenario": name, "run_id": dirs[name].name, "batch_id": "nightly/2026-11-22",
                        "verdict": "x", "finished_at": t + timedelta(days=1), "metrics": {}}, url=history_url)
    summaries = [
        summary("a-passes", "pass", dirs["a-passes"]),
        summary("b-breaks", "fail", dirs["b-breaks"], violations=["300 acknowledged values were lost"],
                metrics={"anomalies": {"lost": 300}, "recovery_s": 9.0, "publish_p99_ms": 800.0}),
        summary("c-fixed", "pass", dirs["c-fixed"], regressions=["recovery_s 9.0 vs median 2.5"]),
        summary("d-error", "error", dirs["d-error"], error="run error: <nft> failed"),
        None,
    ]
    path = report.write_batch_report(summaries, "nightly/2026-11-22", runs, history_url=history_url)
    assert path == runs / "batches" / report.safe_batch_id("nightly/2026-11-22") / "index.html"
    page = path.read_text()
    text = text_of(page)
    assert "ERROR: 4 scenario runs: 2 pass, 1 fail, 1 error, 1 regression" in text
    assert "b-breaks: NEW FAILURE (was pass)" in text and "c-fixed: fixed (was fail)" in text
    assert "d-error" in text and "first run" in text
    assert "300 acknowledged values were lost" in text and "regression: recovery_s 9.0" in text
    assert "&lt;nft&gt;" in page and "<nft>" not in page
    assert "lost 300" in text
    # worst first, and every report link is relative and resolves
    table = text[text.index("Scenarios (worst first)"):]
    assert table.index("d-error") < table.index("b-breaks") < table.index("a-passes")
    hrefs = re.findall(r'href="([^"#]+)"', page)
    assert hrefs and all(not h.startswith("/") for h in hrefs)
    for h in hrefs:
        assert (path.parent / h).resolve().exists(), h


@pytest.mark.unit
def test_batch_report_without_history(tmp_path):
    out = tmp_path / "runs"
    path = report.write_batch_report([summary("a", "pass", None, report=None)], "b1", out,
                                     history_url="nosuchdialect://nowhere")
    text = text_of(path.read_text())
    assert "results history unavailable" in text and "no report" in text


@pytest.mark.unit
def test_upgrade_report(tmp_path, history_url):
    runs = tmp_path / "runs"
    cur = make_run(runs, "s1-current")
    cand = make_run(runs, "s1-candidate")
    for rd in (cur, cand):
        report.write_run_report(rd, history_url=history_url)
    summaries = [summary("s1", "pass", cur, label="current", kafka_version="3.9.2"),
                 summary("s1", "fail", cand, label="candidate", kafka_version="4.3.1",
                         violations=["300 acknowledged values were lost"],
                         metrics={"anomalies": {"lost": 300}, "recovery_s": 9.0, "publish_p99_ms": 800.0}),
                 summary("s2", "pass", None, label="current", kafka_version="3.9.2", report=None)]
    worse = ["s1: pass on 3.9.2 but fail on 4.3.1", "s2: no result on the candidate version"]
    path = report.write_upgrade_report(summaries, worse, "upgrade/run-1", runs)
    assert path == runs / "batches" / report.safe_batch_id("upgrade/run-1") / "index.html"
    page = path.read_text()
    text = text_of(page)
    assert "CANDIDATE 4.3.1 IS WORSE than 3.9.2" in text
    assert "s1: pass on 3.9.2 but fail on 4.3.1" in text and "s2: no result on the candidate version" in text
    assert "current (3.9.2)" in text and "candidate (4.3.1)" in text
    assert "NEW FAILURE (current pass)" in text and "no result on the candidate version" in text
    assert "new on the candidate: lost 300" in text and "p99 800.0 ms vs 45.0 ms" in text
    for h in re.findall(r'href="([^"#]+)"', page):
        assert (path.parent / h).resolve().exists(), h


@pytest.mark.unit
def test_night_report_from_a_directory_of_runs(tmp_path, history_url):
    night = tmp_path / "night"
    make_run(night, "r1", expect_detect=True)
    make_run(night, "r2", expect_detect=False)
    make_run(night, "r3", analysis=False, validation=False)
    summaries = report.find_batch_summaries(night)
    by = {s["run_id"]: s for s in summaries}
    assert by["r1"]["verdict"] == "pass" and by["r1"]["expect"] == "detect"
    assert by["r2"]["verdict"] == "fail" and "300 acknowledged values were lost" in by["r2"]["violations"][0]
    assert by["r3"]["verdict"] == "error" and "no validation result" in by["r3"]["error"]
    path = report.write_night_report(night, history_url=history_url)
    assert path == night / "batches" / "night" / "index.html"
    page = path.read_text()
    for rd in ("r1", "r2", "r3"):
        assert (night / rd / "report" / "index.html").exists()
        assert f'href="../../{rd}/report/index.html"' in page


# --------------------------------------------------------------------------- in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.unit
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path, history_url):
    rd = make_run(tmp_path)
    path = report.write_run_report(rd, history_url=history_url)
    url = path.resolve().as_uri()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(base + ["--enable-logging=stderr", "--v=0", "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<svg class="timeline"' in dom.stdout and 'class="fault-band"' in dom.stdout
    assert dom.stdout.count("<table") >= 6
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    shot = tmp_path / "report.png"
    run = subprocess.run(base + [f"--screenshot={shot}", "--window-size=1400,2400", url], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few KB
    keep = os.environ.get("KAFKAPROOF_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


# --------------------------------------------------------------------------- with the real analysis


@pytest.mark.spark
def test_report_on_real_analysis_and_validation(tmp_path, history_url):
    """spark/analyze.py and validation.py on the golden ledger, then the report (slow: Spark and GX)."""
    from kafkaproof.analysis import analyze, find_spark_submit
    from kafkaproof.errors import AnalysisError
    try:
        find_spark_submit()
    except AnalysisError as e:
        pytest.skip(str(e))
    from kafkaproof.validation import validate
    rd = make_run(tmp_path, analysis=False, validation=False)
    analyze(rd)
    # The manifest's top-level `expect` is the normalised one ({outcome, detect}); the resolved
    # scenario's has no `outcome`.
    result = validate(rd, expect=json.loads((rd / "manifest.json").read_text())["expect"])
    assert result.status == "pass", result.to_dict()
    page = report.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "PASS" in verdict
    assert "Expected anomaly detected (lost): 300 acknowledged values were lost" in verdict
    assert "analysis/timeseries.parquet" in text_of(page)
    assert re.search(r"<code>lost</code></td><td class=\"num\">300</td>", page)
    assert 'href="../validation/data_docs/index.html"' in page


@pytest.mark.unit
def test_batch_report_reads_violations_from_the_run_when_the_summary_has_none(tmp_path, history_url):
    runs = tmp_path / "runs"
    rd = make_run(runs, "r-fail", expect_detect=False)
    s = summary("r", "fail", rd, report=None)
    page = report.write_batch_report([s], "b", runs, history_url=history_url).read_text()
    assert "300 acknowledged values were lost: they are not in the log after the faults healed." in text_of(page)
