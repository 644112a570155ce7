"""The Java share consumer (KafkaShareConsumer, issue 46) on a real Kafka 4.3.1 cluster: exact counts from the
share ledger. Two runs (long, ~2 min with the clusters' start): the catalog's share-clean (every record delivered
once and accepted once) and share-consumers-killed (consumer 0 SIGKILLed mid-batch: what it held comes back after
the lock timeout at delivery count 2, and is accepted once).
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

from support import needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(400)]

CATALOG = Path(__file__).resolve().parents[2] / "scenarios"


def rows(run_dir: Path, name: str) -> list[dict]:
    return pq.read_table(ledger.table_path(run_dir, name)).to_pylist()


def run(name: str, tmp_path: Path) -> Path:
    result = ScenarioRun(resolve(load(CATALOG / f"{name}.yaml")), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    return result.run_dir


def test_a_clean_share_group_accepts_every_record_once(tmp_path):
    d = run("share-clean", tmp_path)
    acked = {r["value_id"] for r in rows(d, "sends") if r["outcome"] == "ok"}
    assert len(acked) == 2000
    deliveries, acks = rows(d, "share_deliveries"), rows(d, "share_acks")
    assert collections.Counter(r["value_id"] for r in deliveries) == {v: 1 for v in acked}
    assert {r["delivery_count"] for r in deliveries} == {1}
    assert len(acks) == 2000 and {(a["type"], a["success"]) for a in acks} == {("accept", True)}
    assert {a["delivery_id"] for a in acks} == {r["delivery_id"] for r in deliveries}
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["share"]["settled"] and manifest["share"]["states"] == {"accepted": 2000}
    assert manifest["clients"]["consumers"] == [] and len(manifest["clients"]["share_consumers"]) == 2
    members = rows(d, "share_members")
    assert collections.Counter(m["event"] for m in members) == {"start": 2, "stop": 2}


def test_a_killed_share_consumers_records_come_back_after_the_lock_timeout(tmp_path):
    d = run("share-consumers-killed", tmp_path)
    acked = {r["value_id"] for r in rows(d, "sends") if r["outcome"] == "ok"}
    assert len(acked) == 3200
    deliveries, acks = rows(d, "share_deliveries"), rows(d, "share_acks")
    kill = next(m for m in rows(d, "share_members") if m["event"] == "killed")
    held = [r for r in deliveries if r["consumer_pid"] == kill["consumer_pid"]
            and r["delivery_id"] not in {a["delivery_id"] for a in acks}]
    assert 0 < len(held) <= 50, "the kill lands mid-batch: the killed consumer held at most one poll's records"
    again = {(r["partition"], r["offset"]): r for r in deliveries if r["delivery_count"] == 2}
    for r in held:  # every record it held came back once, at delivery count 2, after the 5 s lock
        back = again[(r["partition"], r["offset"])]
        assert back["consumer_pid"] != kill["consumer_pid"]
        assert back["acquired_ns"] >= r["acquired_ns"] + 5_000 * 1_000_000
    assert len(again) == len(held) and {r["delivery_count"] for r in deliveries} == {1, 2}
    accepted = collections.Counter(
        (a["partition"], a["offset"]) for a in acks if a["type"] == "accept" and a["success"])
    assert len(accepted) == 3200 and set(accepted.values()) == {1}
