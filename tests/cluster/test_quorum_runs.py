"""Dynamic KRaft quorums (issue 44.3) on a real 4.3.1 cluster: the two catalog scenarios end to end. A controller
replaced (101 out, the spare 104 in) while the leader of partition 0 is killed, and a spare added then the active
controller removed: each quorum fault took effect (its voters before and after), the scenario's `quorum` condition
holds, partition 0 got a new leader where the scenario asks, and nothing acknowledged was lost."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.quorum import QUORUM_KINDS
from kafkaproof.spec.scenario import load

from support import REPO, load_analysis_job, needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(600)]


def run_scenario(name: str, tmp_path):
    """Run a catalog scenario (9,000 values, its own timeline); its ledger tables and the analysis' judge."""
    scenario = load(REPO / "scenarios" / f"{name}.yaml")
    result = ScenarioRun(resolve(scenario, Overrides()), RunOptions(out=tmp_path / name)).execute()
    assert result.status == "complete", result.error

    def table(t):
        return pq.read_table(ledger.table_path(result.run_dir, t)).to_pandas()
    return scenario, table, load_analysis_job()


def lost(table) -> tuple[int, int]:
    sends, audit = table("sends"), table("audit")
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    return len(acked - set(audit["value_id"])), len(acked)


@pytest.mark.parametrize("name", ["kafka4-quorum-replace-controller-leader-kill", "kafka4-quorum-add-remove-leader"])
def test_quorum_changes_take_effect_and_lose_nothing_acknowledged(name, tmp_path):
    scenario, table, job = run_scenario(name, tmp_path)
    faults = table("faults").to_dict("records")
    quorum = [f for f in faults if f["kind"] in QUORUM_KINDS]
    assert len(quorum) == len([f for f in scenario.data["faults"] if f["kind"] in QUORUM_KINDS])
    for f in quorum:
        held, evidence = job.fault_effect(f)
        print(f"{name}: {f['kind']}: {evidence}")
        assert held, evidence
        print(f"{name}: {f['kind']} record {json.loads(f['effect'])['quorum']}")
    results = job.exercise_results(faults, scenario.exercised, table("cluster_snapshots").to_dict("records"),
                                   {}, {}, 0, {}, t0=min(int(f["start_ns"]) for f in faults))
    for r in results:
        print(f"{name}: {r['check']} {r['subject']}: {r['evidence']}")
        assert r["held"], r
    n_lost, n_acked = lost(table)
    print(f"{name}: {n_acked} acknowledged, {n_lost} lost")
    assert n_acked and not n_lost
