"""Log-directory failure (issue 45.3) on a real cluster: brokers with two log directories on diskfs, the one
holding partition 0 on its leader fails; Kafka takes it offline, moves the leadership, loses nothing
acknowledged; the heal brings it back."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

from support import REPO, load_analysis_job, needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(500)]


def test_a_failed_log_directory_moves_leadership_and_loses_nothing_acknowledged(tmp_path):
    scenario = load(REPO / "scenarios" / "jbod-log-dir-failure-leader.yaml")
    result = ScenarioRun(resolve(scenario, Overrides(messages=3000)), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    faults = pq.read_table(ledger.table_path(result.run_dir, "faults")).to_pandas()
    (fault,) = faults.to_dict("records")
    effect = json.loads(fault["effect"])
    print(f"log_dir_failure: {effect}")
    held, evidence = load_analysis_job().fault_effect(fault)
    assert held, evidence
    snaps = pq.read_table(ledger.table_path(result.run_dir, "cluster_snapshots")).to_pandas()
    leaders = list(dict.fromkeys(snaps[snaps["partition"] == 0].sort_values("ts_ns")["leader"]))
    print(f"log_dir_failure: partition 0 leaders {leaders}")
    assert len(leaders) >= 2, "the leadership of partition 0 moved off the failed directory"
    sends = pq.read_table(ledger.table_path(result.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(result.run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    print(f"log_dir_failure: {len(acked)} acknowledged of {len(sends)} sends, "
          f"{len(acked - set(audit['value_id']))} lost")
    assert acked and acked <= set(audit["value_id"])
