"""Correlated faults (issue 45.2) on a real cluster: a kill of one broker and a pause of another, injected at
one instant through the timeline's barrier after the block's one trigger (the consumer's next commit);
acks=all with min ISR 2 loses nothing acknowledged."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

from support import needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(400)]

DOC = {"name": "t-together", "guarantee": "at-least-once",
       "cluster": {"brokers": 3, "config": {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
                                            "broker.heartbeat.interval.ms": 1000}},
       "topic": {"partitions": 1, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
       "producers": {"rate": 500, "messages": 3000, "start_after_s": 1,
                     "config": {"acks": "all", "enable.idempotence": True}},
       "consumers": {"count": 1},
       "faults": [{"at": 2, "after": {"event": "consumer_commit", "consumer": 0}, "together": [{"kind": "kill", "target": "node:1", "duration": 3},
                                         {"kind": "pause", "target": "node:2", "duration": 2}]}]}


def test_a_kill_and_a_pause_start_together_and_lose_nothing_acknowledged(tmp_path):
    path = tmp_path / "t-together.yaml"
    path.write_text(yaml.safe_dump(DOC))
    result = ScenarioRun(resolve(load(path), Overrides()), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    faults = pq.read_table(ledger.table_path(result.run_dir, "faults")).to_pandas().sort_values("start_ns")
    assert list(faults["kind"]) == ["kill", "pause"] or sorted(faults["kind"]) == ["kill", "pause"]
    effects = [json.loads(e) for e in faults["effect"]]
    assert [(e["group"], e["group_size"]) for e in effects] == [(0, 2), (0, 2)]
    triggers = [e["trigger"] for e in effects]
    assert triggers[0] == triggers[1] and triggers[0]["event"] == "consumer_commit", triggers  # awaited once
    print(f"together: the block's trigger held {triggers[0]['waited_s']} s after t=2")
    skew_ms = (faults["start_ns"].max() - faults["start_ns"].min()) / 1e6
    print(f"together: kill and pause began {skew_ms:.1f} ms apart")
    assert skew_ms < 100
    sends = pq.read_table(ledger.table_path(result.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(result.run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    print(f"together: {len(acked)} acknowledged of {len(sends)} sends, {len(acked - set(audit['value_id']))} lost")
    assert acked and acked <= set(audit["value_id"]), "acks=all, min ISR 2: nothing acknowledged is lost"
