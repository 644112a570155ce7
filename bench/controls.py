"""Every negative control detects every time: each control of the catalog run N times.

A negative control (a scenario whose `expect` lists anomalies it must detect) that detects
only by chance is a gate that flickers. This runs each control `--runs` times on fresh
clusters, analyses all runs with one spark-submit, validates each, and prints per control how
often it detected what it must (target: every time), and why a miss missed.

    .venv/bin/python bench/controls.py [--runs 20] [--scenario NAME ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import logs, pipeline  # noqa: E402
from kafkaproof.analysis import analyze_many  # noqa: E402
from kafkaproof.run import RunOptions, ScenarioRun  # noqa: E402
from kafkaproof.run.resolved import resolve  # noqa: E402
from kafkaproof.verdict.validation import validate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--scenario", action="append", help="a control by name (default: every control)")
    parser.add_argument("--out", type=Path, default=Path("runs") / "bench-controls")
    args = parser.parse_args()
    logs.setup()
    controls = [s for s in (pipeline.suite(names=args.scenario) if args.scenario else pipeline.suite("full"))
                if s.expect["outcome"] == "detect"]
    table = []
    for scn in controls:
        started = time.monotonic()
        runs = [ScenarioRun(resolve(scn), RunOptions(out=args.out / scn.name)).execute()
                for _ in range(args.runs)]
        complete = [r.run_dir for r in runs if r.status == "complete"]
        if complete:
            analyze_many(complete, quiet=True)
        detected, misses = 0, []
        for r in runs:
            if r.status != "complete":
                misses.append(f"{r.run_id}: run {r.status}: {r.error}")
                continue
            v = validate(r.run_dir, data_docs=False)
            if v.status == "pass":
                detected += 1
            else:
                misses.append(f"{r.run_id}: {v.status}: " + "; ".join(
                    v.errors + [f"{row.anomaly}={row.count}" for row in v.rows if row.expected_detected]))
        table.append((scn.name, detected, len(runs), time.monotonic() - started, misses))
        print(f"{scn.name}: detected {detected} of {len(runs)} ({time.monotonic() - started:.0f} s)"
              + "".join(f"\n    {m}" for m in misses[:5]), flush=True)
    print(f"\n{'negative control':<52} detected")
    for name, hit, n, secs, _ in table:
        print(f"{name:<52} {hit:>3} / {n}  ({secs / max(n, 1):.0f} s per run)")
    return 0 if all(hit == n for _, hit, n, _, _ in table) else 1


if __name__ == "__main__":
    sys.exit(main())
