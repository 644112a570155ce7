"""Where a night goes: the breakdown of one nightly DAG run from its `make run` log.

Reads the log `make run` keeps (`.airflow/last-run.log`, or the path given) and the manifests of
the runs its `analyze` task analysed, and prints: the DAG run's wall time; the sum of the
scenarios' workload phases and the ratio wall ÷ workload; the time by kind of task (cluster
start, workload runs, teardown, the one Spark analysis, judging), the run phases inside
`run_workload`, the time no task was running (Airflow's own overhead) and how many runs had a
fresh cluster or a reused one; then how late the
fault tasks' injections began against their schedule (median, max), the triggered ones apart.

    .venv/bin/python bench/night.py [.airflow/last-run.log]
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

TASK_FINISHED = re.compile(r"TaskInstance Finished: dag_id=[^,]*, task_id=([^,]+),.* map_index=(-?\d+),.* "
                           r"run_start_date=([^,]+), run_end_date=([^,]+), run_duration=([\d.]+), state=(\w+)")
DAG_FINISHED = re.compile(r"DagRun Finished: .* run_duration=([\d.]+), state=(\w+)")
PHASES = ("provision", "create_topic", "workload", "heal", "settle", "drain", "teardown", "assemble")


GROUP_STEPS = {"provision": "provision (cluster start)", "run_workload": "run_workload",
               "teardown_cluster": "teardown"}
OTHER_KINDS = {"analyze": "analyze (one spark-submit)", "judge": "judge (mapped)"}


def task_kind(task_id: str) -> str:
    """What a task is: a step of a scenario group, a fault task (any other task of a group), or its own kind."""
    group, _, leaf = task_id.rpartition(".")
    if group:
        return GROUP_STEPS.get(leaf, "fault tasks")
    return OTHER_KINDS.get(leaf, leaf)


def union_seconds(intervals: list[tuple[datetime, datetime]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += (b - a).total_seconds()
            end = b
        elif b > end:
            total += (b - end).total_seconds()
            end = b
    return total


def main() -> int:
    log_path = Path(sys.argv[1] if len(sys.argv) > 1 else ".airflow/last-run.log")
    text = log_path.read_text(errors="replace")
    tasks: dict[tuple[str, str], tuple[datetime, datetime, float, str]] = {}
    for m in TASK_FINISHED.finditer(text):
        start, end = (datetime.fromisoformat(x.strip()) for x in (m.group(3), m.group(4)))
        tasks[(m.group(1), m.group(2))] = (start, end, float(m.group(5)), m.group(6))
    dag = DAG_FINISHED.findall(text)
    if not tasks or not dag:
        print(f"{log_path}: no finished DAG run in this log (run `make run` first)")
        return 1
    wall, dag_state = float(dag[-1][0]), dag[-1][1]
    cmd = [line for line in text.splitlines() if "Spark-Submit cmd:" in line]
    run_dirs = [Path(a) for a in (cmd[-1].split("analyze.py", 1)[1].split() if cmd else [])]
    manifests = [json.loads((d / "manifest.json").read_text()) for d in run_dirs if (d / "manifest.json").exists()]
    phases: dict[str, float] = defaultdict(float)
    for m in manifests:
        for phase, t in (m.get("timings") or {}).items():
            phases[phase] += t["seconds"]
    workload = phases.get("workload", 0.0)
    by_kind: dict[str, float] = defaultdict(float)
    for (tid, _), (_, _, secs, _) in tasks.items():
        by_kind[task_kind(tid)] += secs
    busy = union_seconds([(a, b) for a, b, _, _ in tasks.values()])

    print(f"DAG run: {dag_state} in {wall:.0f} s; {len(manifests)} runs analysed; {len(tasks)} task instances")
    print(f"sum of workload phases: {workload:.0f} s -> wall / workload = {wall / workload:.2f}" if workload else
          "no workload phases found (no run was analysed)")
    print("\ntime by kind of task (task seconds; fault tasks overlap their workload):")
    for kind, secs in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<28} {secs:7.0f} s")
    print("\ninside run_workload (sums over runs):")
    for phase in PHASES:
        if phase in phases:
            print(f"  {phase:<28} {phases[phase]:7.0f} s")
    print(f"\nno task running (Airflow scheduling, task start-up): {wall - busy:.0f} s of {wall:.0f} s")
    reused = sum(1 for m in manifests if (m.get("cluster_reuse") or {}).get("reused"))
    print(f"clusters: {len(manifests) - reused} started fresh, {reused} runs on a cluster reused (checked clean)")

    timing = re.findall(r"(fault tasks: \d+ injected[^\[\n]*[^\s\[])", text)
    if timing:
        print(f"\n{timing[-1]} (the gate's line)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
