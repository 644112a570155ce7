"""Jepsen's delayed Produce against a real cluster, transactions v1 and v2 (issue 43): the two catalog scenarios
eos-delayed-produce-txn-v1|v2 end to end (runs, one spark-submit, verdicts), with the proxy's evidence.

The proxy holds the first transactional Produce to output partition 0 for 12 s; the copier times out after 3 s,
aborts, copies the batch again; the proxy then delivers the held request on its own broker connection. Each
scenario claims a pass: the committed output holds every input exactly once and no late write landed.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafkaproof import analysis, pipeline
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.verdict.validation import format_result, validate

from support import needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root, pytest.mark.timeout(600)]
SCENARIOS = ("eos-delayed-produce-txn-v1", "eos-delayed-produce-txn-v2")


def rows(run_dir: Path, name: str) -> list[dict]:
    return pq.read_table(ledger.table_path(run_dir, name)).to_pylist()


def test_a_held_transactional_produce_delivered_late_is_fenced_under_v1_and_v2(tmp_path):
    runs = {}
    for scn in pipeline.suite(names=list(SCENARIOS)):
        result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path)).execute()
        assert result.status == "complete", f"{scn.name}: {result.error}"
        runs[scn.name] = result.run_dir
    analysis.analyze_many(list(runs.values()), quiet=True)
    for name, d in runs.items():
        manifest = json.loads((d / "manifest.json").read_text())
        level = int(name[-1])
        assert manifest["features"]["format"]["transaction.version"] == level
        assert manifest["features"]["finalized"]["transaction.version"] == level
        events = collections.defaultdict(list)
        for e in rows(d, "proxy_events"):
            if e["action"] == "hold":
                events[e["phase"]].append(e)
        assert len(events["held"]) == 1, f"{name}: {dict(events)}"
        held = json.loads(events["held"][0]["detail"])
        assert held["transactional_id"].startswith(f"kp-{name}-") and held["batches"][0]["partition"] == 0
        # The copier gave up on the held request before its release; the proxy delivered it on its own connection.
        assert len(events["held_client_gone"]) == 1 and len(events["held_delivered"]) == 1, f"{name}: {dict(events)}"
        answered = events["held_answered"]
        assert len(answered) == 1, f"{name}: {dict(events)}"
        errors = json.loads(answered[0]["detail"])["errors"]
        assert errors == ["INVALID_PRODUCER_EPOCH"], f"{name}: the late write was not fenced: {errors}"
        assert answered[0]["ts_ns"] > events["held_client_gone"][0]["ts_ns"]
        # Every acked input exactly once in the committed output; nothing of the aborted transaction committed.
        acked = {r["value_id"] for r in rows(d, "sends") if r["outcome"] == "ok"}
        committed = collections.Counter(r["value_id"] for r in rows(d, "output_audit") if r["committed"])
        assert set(committed) == acked and set(committed.values()) == {1}, name
        txns = collections.Counter(t["outcome"] for t in rows(d, "transactions"))
        assert txns["aborted"] >= 1, f"{name}: the held write's transaction must have aborted: {txns}"
        v = validate(d, data_docs=False)
        assert v.status == "pass", format_result(v)
        print(f"[delayed-produce] {name}: {len(acked)} inputs once; transactions {dict(txns)}; held "
              f"{held['batches'][0]}; answered {errors}")
