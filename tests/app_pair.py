"""Application scenarios of the catalog run, analysed with one spark-submit and judged: shared by the local
backend's tests (tests/cluster/test_app_scenarios.py) and the compose backend's (tests/compose/test_app_containers.py)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from kafkaproof import analysis, pipeline
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.verdict.validation import format_result, validate


def run_and_judge(names: tuple[str, ...], out: Path, tag: str) -> tuple[dict, dict]:
    """Run each catalog scenario into `out` (each must complete), analyse them with one spark-submit, judge
    each. Returns the runs' results and verdicts by scenario name; prints each run's and the analysis's
    time and the application's counts as `[tag] ...`."""
    results = {}
    for scn in pipeline.suite(names=list(names)):
        started = time.monotonic()
        result = ScenarioRun(resolve(scn), RunOptions(out=out)).execute()
        print(f"[{tag}] {scn.name}: run {result.status} in {time.monotonic() - started:.1f} s", flush=True)
        assert result.status == "complete", result.error
        results[scn.name] = result
    runs = {name: result.run_dir for name, result in results.items()}
    started = time.monotonic()
    analysis.analyze_many(list(runs.values()), quiet=True)
    print(f"[{tag}] analysis of {len(runs)} in {time.monotonic() - started:.1f} s", flush=True)
    verdicts = {name: validate(run_dir, data_docs=False) for name, run_dir in runs.items()}
    for name, v in verdicts.items():
        manifest = json.loads((runs[name] / "manifest.json").read_text())
        print(f"[{tag}] {format_result(v)}\n[{tag}] requests {manifest['application']['requests']} "
              f"decode {manifest['application']['decode']['read_committed']['matched']} matched", flush=True)
    return results, verdicts


def run_e6_pair(names: tuple[str, str], out: Path, tag: str) -> tuple[dict, dict]:
    """`run_and_judge` the E6 pair (answer-before-ack, wait-for-ack); check the first detected `lost` and
    the second lost nothing, both passing."""
    results, verdicts = run_and_judge(names, out, tag)
    check_e6_pair(verdicts, names)
    return results, verdicts


def check_e6_pair(verdicts: dict, names: tuple[str, str]) -> None:
    """The E6 pair's verdicts: the first (answer-before-ack) detected `lost`, the second lost nothing, both pass."""
    before, after = verdicts[names[0]], verdicts[names[1]]
    assert before.status == "pass", format_result(before)  # the negative control found the loss
    lost = next(r for r in before.rows if r.anomaly == "lost")
    assert lost.count > 0 and lost.expected_detected
    assert after.status == "pass", format_result(after)
    assert next(r for r in after.rows if r.anomaly == "lost").count == 0
