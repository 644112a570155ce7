"""A seeded random fault schedule on a real cluster: drawn, recorded, and replayed exactly."""
from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

from support import needs_root

pytestmark = [pytest.mark.cluster, needs_root]

DOC = {"name": "t-random", "guarantee": "at-least-once",
       "cluster": {"brokers": 3, "config": {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
                                            "broker.heartbeat.interval.ms": 1000}},
       "topic": {"partitions": 3, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
       "producers": {"rate": 500, "messages": 5000, "start_after_s": 1,
                     "config": {"acks": "all", "enable.idempotence": True}},
       "consumers": {"count": 1, "commit": "sync"},
       "faults": {"random": {"kinds": [{"kind": "kill"}, {"kind": "pause"},
                                       {"kind": "isolate", "targets": ["follower:0"]}],
                             "interval_s": [1, 2], "duration_s": [1, 2], "quiet_s": 1, "start_s": 2}}}


def injected(run_dir) -> list[tuple[str, str]]:
    faults = pq.read_table(ledger.table_path(run_dir, "faults")).to_pandas().sort_values("start_ns")
    for target, nodes in zip(faults["target"], faults["nodes"]):  # `random` was drawn as a node up front
        assert not target.startswith("node:") or list(nodes) == [int(target[5:])]
    return list(zip(faults["kind"], faults["target"]))


@pytest.mark.long
def test_a_random_schedule_is_drawn_from_its_seed_recorded_and_replayed_exactly(tmp_path):
    path = tmp_path / "t-random.yaml"
    path.write_text(yaml.safe_dump(DOC))
    first = ScenarioRun(resolve(load(path), Overrides(seed=1234)), RunOptions(out=tmp_path / "runs")).execute()
    assert first.status == "complete", first.error
    schedule = ledger.read_manifest(first.run_dir)["random_schedule"]
    assert schedule["seed"] == 1234 and len(schedule["faults"]) >= 3
    assert all(f["target"] != "random" for f in schedule["faults"])
    assert injected(first.run_dir) == [(f["kind"], f["target"]) for f in schedule["faults"]]
    sends = pq.read_table(ledger.table_path(first.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(first.run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    assert acked <= set(audit["value_id"]), "acks=all, idempotent: nothing acknowledged is lost"

    replay = subprocess.run([sys.executable, "-m", "kafkaproof", "run", "--replay", str(first.run_dir),
                             "--out", str(tmp_path / "replay")], capture_output=True, text=True, timeout=600)
    assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr[-3000:]
    (again,) = (tmp_path / "replay").iterdir()
    replayed = ledger.read_manifest(again)["random_schedule"]
    assert json.dumps(replayed, sort_keys=True) == json.dumps(schedule, sort_keys=True)  # byte for byte
    assert injected(again) == injected(first.run_dir)
