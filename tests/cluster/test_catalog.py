"""Every scenario of a catalog suite gets the verdict it claims (`pytest -m catalog`; long).

Selects the `full` suite (or `KAFKAPROOF_CATALOG_TAG`, or the names in `KAFKAPROOF_CATALOG_NAMES`,
comma-separated), runs each on its own local cluster, analyses them all with one spark-submit,
validates each, and prints a table: scenario, run seconds, verdict, anomalies. It fails when a
scenario does not get the verdict it claims (pass, or a negative control that detects its
anomaly), when a hard anomaly appears in a scenario that claims to pass, or when a run is
not complete.
"""
from __future__ import annotations

import os
import time

import pytest

from kafkaproof import analysis, pipeline
from kafkaproof.verdict.policy import load_policy
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.verdict.validation import format_result, validate

from support import needs_root

# ~30 scenarios of ~40 s each and one analysis: far beyond the default per-test timeout
pytestmark = [pytest.mark.catalog, pytest.mark.cluster, needs_root, pytest.mark.timeout(5400)]


def selected():
    names = [n for n in os.environ.get("KAFKAPROOF_CATALOG_NAMES", "").split(",") if n]
    if names:
        return pipeline.suite(names=names)
    return pipeline.suite(os.environ.get("KAFKAPROOF_CATALOG_TAG", "full"))


def test_every_scenario_gets_the_verdict_it_claims(tmp_path):
    policy = load_policy()
    hard = {k.name for k in policy.kinds if k.cls == "hard"}
    rows, problems, complete = [], [], []
    for scn in selected():
        started = time.monotonic()
        result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path)).execute()
        rows.append({"scenario": scn.name, "run_s": round(time.monotonic() - started, 1), "run": result})
        print(f"[catalog] {len(rows)}: {scn.name} {result.status} in {rows[-1]['run_s']} s", flush=True)
        if result.status == "complete":
            complete.append(result.run_dir)
        else:
            problems.append(f"{scn.name}: run {result.status}: {result.error}")
    started = time.monotonic()
    analysis.analyze_many(complete, quiet=True)
    spark_s = time.monotonic() - started
    for row in rows:
        run = row["run"]
        if run.status != "complete":
            row.update(verdict="error", anomalies="-")
            continue
        v = validate(run.run_dir, data_docs=False)
        expect = v.expect
        counts = {r.anomaly: r.count for r in v.rows if r.count}
        row.update(verdict=v.status, anomalies=", ".join(f"{k}={n}" for k, n in counts.items()) or "none")
        if v.status != "pass":
            problems.append(f"{row['scenario']}: {format_result(v)}")
        # A negative control's fault often causes other anomalies with the one it expects (an unclean
        # election's lost writes also leave reused offsets); a scenario that claims to pass may show none.
        unexpected_hard = sorted(k for k in counts if k in hard) if expect.get("outcome") != "detect" else []
        if unexpected_hard:
            problems.append(f"{row['scenario']}: hard anomalies it does not expect: {unexpected_hard}")
    print(f"\n{'scenario':<52} {'run s':>6}  {'verdict':<7} anomalies")
    for row in rows:
        print(f"{row['scenario']:<52} {row['run_s']:>6}  {row['verdict']:<7} {row['anomalies']}")
    print(f"{len(rows)} scenarios, {sum(r['run_s'] for r in rows):.0f} s of runs, {spark_s:.0f} s of Spark "
          f"(one spark-submit)")
    assert not problems, "\n".join(problems)
