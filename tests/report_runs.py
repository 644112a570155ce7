"""A hand-built run directory for the report tests: an unclean election that loses 300 acknowledged values.

`make_run` writes its ledger, manifest and (optionally) analysis and validation outputs; the
report tests (unit: tests/unit/report, with Spark: tests/spark) read the pages written from it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafkaproof.spec.ledger import make_value_id, write_manifest, write_table

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


# What the injector records when a fault took effect (see docs/ledger-schema.md, faults.effect).
FAULT_EFFECTS = {"isolate": {"dropped_packets": 412}, "kill": {"node_states": {"1": "dead"}}}


def fault_rows() -> list[dict]:
    return [{"fault_id": fid, "kind": kind, "target": target, "nodes": nodes, "params": "{}",
             "start_ns": ns(a), "heal_ns": ns(b), "start_wall": "2026-11-22T02:00:08+00:00",
             "heal_wall": "2026-11-22T02:00:14+00:00", "effect": json.dumps(FAULT_EFFECTS[kind])}
            for fid, kind, target, nodes, a, b in FAULTS]


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
                "observed_duplicates": "soft",
                "indefinite_landed": "info", "inconsistent_offsets": "hard", "ack_offset_mismatch": "hard",
                "reordering": "soft", "poll_skips": "soft", "poll_rewinds": "soft", "poll_inversion": "hard",
                "unknown_values": "hard", "undelivered_attempts": "soft", "reprocessed": "soft",
                "eos_lost": "soft", "eos_duplicated": "soft", "eos_aborted_read": "soft", "precommitted_read": "soft",
                "offsets_outputs_disagree": "soft", "hanging_transaction": "soft",
                "eos_late_write": "soft", "lso_stall": "soft", "eos_dirty_read": "info",
                **{k: "soft" for k in ("share_accepted_twice", "share_undelivered", "share_not_returned",
                                       "share_rejected_returned", "share_concurrent_acquisition",
                                       "share_delivery_count", "share_past_limit")},
                "rewind_below_commit": "soft", "skip_above_commit": "soft", "commit_beyond_read": "soft",
                "commit_regression": "hard", "double_ownership": "soft"}


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
            allowed, ok = kind == "lost" or kind in allowed_alo or cls == "info", (n > 0) if kind == "lost" else True
        else:
            allowed = kind in allowed_alo or cls == "info"
            ok = allowed or n == 0
        rows.append({"anomaly": kind, "count": n, "allowed": allowed, "expected_detected": expect_detect and kind == "lost",
                     "ok": ok, "cls": cls, "summary": f"{kind} summary", "examples": [],
                     "also_found": ok and not allowed and n > 0})
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
