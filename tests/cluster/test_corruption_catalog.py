"""The corruption scenarios whose node refuses its damaged files at its start (issue 45), end to end with one
spark-submit: a leader's leader-epoch checkpoint cut while it is down, one controller's KRaft snapshots (and its
metadata log) bit-flipped while it is down. Each gets its claimed verdict (pass: nothing acknowledged lost),
and the heal records the node's refusal with Kafka's own exception line (`start_refused`)."""
from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from kafkaproof import analysis, pipeline
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.verdict.validation import format_result, validate

from support import needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(900)]

# scenario -> what Kafka's refusal line says
REFUSALS = {"corruption-leader-epoch-checkpoint": "but found only [0]",
            "corruption-kraft-snapshot-one-controller": "CorruptRecordException",
            "corruption-kraft-metadata-one-controller": "CorruptRecordException"}


def test_nodes_refusing_their_damaged_files_lose_nothing_acknowledged(tmp_path):
    runs = {}
    for scn in pipeline.suite(names=list(REFUSALS)):
        started = time.monotonic()
        result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path)).execute()
        assert result.status == "complete", f"{scn.name}: {result.error}"
        runs[scn.name] = (result.run_dir, time.monotonic() - started)
    started = time.monotonic()
    analysis.analyze_many([d for d, _ in runs.values()], quiet=True)
    print(f"\none spark-submit for {len(runs)} runs: {time.monotonic() - started:.0f} s")
    problems = []
    for name, (run_dir, run_s) in runs.items():
        v = validate(run_dir, data_docs=False)
        faults = pq.read_table(ledger.table_path(run_dir, "faults")).to_pandas()
        effect = json.loads(faults["effect"].iloc[0])
        refused = effect.get("start_refused") or {}
        flipped = sum(f.get("flipped", 0) for files in effect["corrupted"].values() for f in files)
        cut = sum(f.get("cut", 0) for files in effect["corrupted"].values() for f in files)
        sends = pq.read_table(ledger.table_path(run_dir, "sends")).to_pandas()
        audit = pq.read_table(ledger.table_path(run_dir, "audit")).to_pandas()
        acked = set(sends[sends["outcome"] == "ok"]["value_id"])
        lost = len(acked - set(audit["value_id"]))
        print(f"{name}: {run_s:.0f} s, verdict {v.status}, {len(acked)} of {len(sends)} acknowledged, {lost} lost; "
              f"{flipped} bits flipped, {cut} bytes cut; refused: {refused}")
        if v.status != "pass":
            problems.append(f"{name}: {format_result(v)}")
        if lost or len(acked) != len(sends):
            problems.append(f"{name}: {lost} acknowledged lost, {len(acked)} of {len(sends)} acknowledged")
        if len(refused) != 1 or REFUSALS[name] not in next(iter(refused.values())):
            problems.append(f"{name}: start_refused {refused}, expected one node's line with {REFUSALS[name]!r}")
    assert not problems, "\n".join(problems)
