"""Scenario runs on a real cluster: the ledger must account for every value."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.spec import ledger
from kafkaproof.cluster import network, state
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec.scenario import load

from support import needs_root

pytestmark = pytest.mark.cluster


def scenario_file(tmp_path: Path, **overrides) -> Path:
    doc = {"name": "t-run", "guarantee": "at-least-once",
           "cluster": {"brokers": 3, "config": {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
                                                "broker.heartbeat.interval.ms": 1000}},
           "topic": {"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 400, "messages": 2000, "start_after_s": 1, "config": {"acks": "all", "enable.idempotence": True}},
           "consumers": {"count": 1, "commit": "sync"}}
    doc.update(overrides)
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(path: Path, out: Path):
    return ScenarioRun(resolve(load(path)), RunOptions(out=out)).execute()


def table(run_dir: Path, name: str):
    return pq.read_table(ledger.table_path(run_dir, name)).to_pandas()


def test_baseline_ledger_accounts_for_every_value(tmp_path):
    result = run(scenario_file(tmp_path), tmp_path / "runs")
    assert result.status == "complete", result.error
    sends, reads, audit = (table(result.run_dir, n) for n in ("sends", "reads", "audit"))
    assert len(sends) == 2000 and sends["value_id"].is_unique
    assert set(sends["outcome"]) == {"ok"}
    assert (sends["complete_ns"] >= sends["send_ns"]).all() and (sends["send_ns"] >= sends["intended_ns"]).all()
    acked = set(sends["value_id"])
    for iso in ("read_committed", "read_uncommitted"):
        log = audit[audit["isolation"] == iso]
        assert len(log) == 2000 and set(log["value_id"]) == acked, iso
    assert len(reads) == 2000 and set(reads["value_id"]) == acked
    # each poll's records numbered 0, 1, ... in the order the client returned them; offsets rise in each partition
    for _, poll in reads.groupby(["consumer_pid", "poll_id"], sort=False):
        assert list(poll["poll_seq"]) == list(range(len(poll)))
        assert all(part["offset"].is_monotonic_increasing for _, part in poll.groupby("partition"))
    events = table(result.run_dir, "consumer_events")
    rebalances = events["event"].isin(["assign", "revoke", "lost"])
    assigns = events[events["event"] == "assign"]
    assert len(assigns) and all(list(a) == [0, 1] for a in assigns["assigned"])  # the one consumer holds both
    assert events[~rebalances]["assigned"].isna().all()
    # every ack's offset holds that value in the log
    log = audit[audit["isolation"] == "read_uncommitted"].set_index(["partition", "offset"])["value_id"]
    assert all(log[(p, o)] == v for p, o, v in zip(sends["partition"], sends["offset"], sends["value_id"]))
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["status"] == "complete" and manifest["counts"]["sends_ok"] == 2000
    assert manifest["versions"]["kafka"] == manifest["cluster"]["kafka_version"]
    assert len(table(result.run_dir, "cluster_snapshots")) > 0
    assert {"provision", "workload", "drain", "teardown"} <= set(manifest["timings"])
    assert (result.run_dir / "logs" / "node-1.log").exists()


@needs_root
def test_leader_kill_and_consumer_kill_are_recorded_and_healed(tmp_path):
    path = scenario_file(tmp_path, name="t-faults", faults=[
        {"at": 5, "kind": "kill", "target": "consumer:0", "duration": 1},
        {"at": 7, "kind": "kill", "target": "leader:0", "duration": 3}],
        producers={"rate": 200, "messages": 2000, "start_after_s": 1,
                   "config": {"acks": "all", "enable.idempotence": True}},
        # the killed consumer's group membership expires after the session timeout (45 s by default)
        consumers={"count": 1, "commit": "sync", "config": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}})
    result = run(path, tmp_path / "runs")
    assert result.status == "complete", result.error
    faults = table(result.run_dir, "faults")
    assert list(faults["target"]) == ["consumer:0", "leader:0"]
    assert faults["heal_ns"].notna().all() and (faults["heal_ns"] > faults["start_ns"]).all()
    assert faults.iloc[1]["nodes"].tolist() and not faults.iloc[0]["nodes"].tolist()
    events = table(result.run_dir, "consumer_events")
    starts = events[events["event"] == "start"]
    assert list(starts["incarnation"]) == [0, 1] and starts["consumer_pid"].nunique() == 2, "restarted as a new process"
    reads = table(result.run_dir, "reads")
    assert reads["incarnation"].max() == 1 and set(reads["value_id"]) == set(table(result.run_dir, "sends")["value_id"])
    sends = table(result.run_dir, "sends")
    audit = table(result.run_dir, "audit")
    assert set(sends[sends["outcome"] == "ok"]["value_id"]) <= set(audit["value_id"]), "acks=all lost nothing"
    assert not state.list_clusters() or all(not n.startswith("run-") for n in state.list_clusters())


def test_bad_scenario_is_rejected_before_anything_starts(tmp_path):
    bad = scenario_file(tmp_path, name="t-bad", faults=[{"at": 1, "kind": "kill", "target": "node:9"}])
    before = set(state.list_clusters())
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "run", str(bad), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"{bad}: faults[0].target: node 9 does not exist; nodes are [1, 2, 3]" in r.stderr
    assert set(state.list_clusters()) == before and not (tmp_path / "runs").exists()


def test_interrupted_run_tears_down_and_is_incomplete(tmp_path):
    path = scenario_file(tmp_path, name="t-interrupt", producers={"rate": 100, "duration_s": 120})
    proc = subprocess.Popen([sys.executable, "-m", "kafkaproof", "run", str(path), "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "sent=" in line and "sent=0 " not in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, "".join(seen[-20:]) + rest
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and "interrupted" in manifest["error"]
    cluster = manifest["cluster"]["name"]
    assert cluster not in state.list_clusters()
    if network.namespaces_supported():
        assert not [ns for ns in network.list_kafkaproof_namespaces()
                    if any(ns == n["namespace"] for n in manifest["cluster"]["nodes"])]


def test_aborted_transactions_really_write_their_records(tmp_path):
    """An aborted transaction's records sit in the log between markers: the read_uncommitted drain
    returns them, the read_committed drain and a read_committed consumer never do."""
    path = scenario_file(tmp_path, name="t-txn", topic={"partitions": 1, "replication_factor": 3},
                         producers={"rate": 400, "messages": 1000, "start_after_s": 1,
                                    "transactions": {"batch": 50, "abort_probability": 0.5},
                                    "config": {"acks": "all", "enable.idempotence": True}},
                         consumers={"count": 1, "commit": "sync", "isolation_level": "read_committed"})
    result = run(path, tmp_path / "runs")
    assert result.status == "complete", result.error
    sends, audit, reads = (table(result.run_dir, n) for n in ("sends", "audit", "reads"))
    aborted = set(sends[sends["txn_outcome"] == "abort"]["value_id"])
    committed = set(sends[sends["txn_outcome"] == "commit"]["value_id"])
    assert aborted and committed
    uncommitted_log = set(audit[audit["isolation"] == "read_uncommitted"]["value_id"])
    committed_log = set(audit[audit["isolation"] == "read_committed"]["value_id"])
    assert aborted <= uncommitted_log, "aborted records were written before the abort"
    assert not aborted & committed_log and committed <= committed_log
    assert not aborted & set(reads["value_id"]) and committed <= set(reads["value_id"])
