"""Eligible leader replicas (KIP-966) on and off end to end on a real Kafka 4.3.1 cluster (issue 44.2; long).

The pair kafka4-elr-{on,off}-last-isr-power-loss: the follower stops, the last ISR member loses power, the
follower returns first. With ELR on the follower is elected from the ELR before the old leader is back and
nothing acknowledged is lost (pass); with ELR off the partition waits for the old leader, which leads with the
log its power loss shortened, and acknowledged writes are lost (the negative control detects `lost`). Both
get the verdict they claim; the manifests show the pinned levels, the finalised ones, and the ELR evidence.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkaproof import analysis
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.cluster_features import ELR_FEATURE
from kafkaproof.spec.elr_evidence import elections, leaderless_windows
from kafkaproof.spec.scenario import load
from kafkaproof.verdict.validation import validate

from support import needs_root

pytestmark = [pytest.mark.long, pytest.mark.cluster, needs_root, pytest.mark.timeout(1200)]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _run(name: str, out: Path):
    started = time.monotonic()
    result = ScenarioRun(resolve(load(SCENARIOS / f"{name}.yaml")), RunOptions(out=out)).execute()
    print(f"[elr] {name}: {result.status} in {time.monotonic() - started:.0f} s", flush=True)
    assert result.status == "complete", result.error
    return result


def test_elr_on_elects_the_returning_follower_and_off_loses_what_was_acknowledged(tmp_path):
    runs = {elr: _run(f"kafka4-elr-{elr}-last-isr-power-loss", tmp_path) for elr in ("on", "off")}
    analysis.analyze_many([r.run_dir for r in runs.values()], quiet=True)
    found = {}
    for elr, result in runs.items():
        manifest = ledger.read_manifest(result.run_dir)
        level = 1 if elr == "on" else 0
        assert manifest["features"]["format"] == {ELR_FEATURE: level}
        assert manifest["features"]["finalized"].get(ELR_FEATURE, 0) == level, manifest["features"]
        section = manifest["elr"]
        assert section["samples"] > 20 and section["changes"], section
        v = validate(result.run_dir, data_docs=False)
        counts = {r.anomaly: r.count for r in v.rows if r.count}
        found[elr] = (section, counts, manifest["counts"])
        print(f"[elr] {elr}: verdict {v.status}, anomalies {counts}, acked {manifest['counts']['sends_ok']}, "
              f"elections {[(e['leader'], e['from_elr']) for e in elections(section)]}, "
              f"leaderless {leaderless_windows(section)}", flush=True)
        assert v.status == "pass", (elr, v.status, counts)
    on, on_counts, _ = found["on"]
    picked = elections(on)
    assert any(e["from_elr"] for e in picked), on["changes"]  # the follower, elected from the ELR
    assert not on_counts.get("lost")
    off, off_counts, _ = found["off"]
    assert not any(e["from_elr"] for e in elections(off)), off["changes"]
    assert off_counts.get("lost", 0) > 0  # the negative control: acknowledged writes gone
