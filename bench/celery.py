"""One Celery worker against two (issue 42): the `smoke` suite, cluster reuse off, on a `scripts/celery.sh`
deployment with CELERY_HOSTS="w1" and then "w1 w2", alternating ROUNDS times (default 2).

For each DAG run it prints the wall time (the DAG run's start to end in the metadata database) and the CPU
share of the machine while it ran (/proc/stat: busy time over all cores), then the median wall time of each
arm and the ratio one ÷ two. Each arm gets a fresh deployment (its own directory and database) brought up
before and down after its DAG run; only the DAG run is timed. Heavy: run it alone (flock the heavy lock).

    flock /tmp/kafkaproof-heavy.lock .venv/bin/python bench/celery.py [ROUNDS]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DAG = "kafka_reliability_nightly"
ARMS = {"one worker": "w1", "two workers": "w1 w2"}


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def script(env: dict[str, str], *args: str) -> None:
    subprocess.run(["bash", "scripts/celery.sh", *args], cwd=REPO, env=env, check=True, timeout=900,
                   stdout=subprocess.DEVNULL)


def sql(port: int, query: str, *params) -> list[tuple]:
    import psycopg2
    with psycopg2.connect(host="127.0.0.1", port=port, user="kafkaproof", dbname="airflow",
                          connect_timeout=10) as db, db.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall()


def wait(what: str, timeout_s: float, poll):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = poll()
        if got:
            return got
        time.sleep(3)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f}s")


def one_run(hosts: str, pg_port: int = 5440) -> tuple[float, float, str]:
    """Bring a deployment with `hosts` up, run the suite once, bring it down: (wall s, CPU share, state)."""
    base = Path(tempfile.mkdtemp(prefix="kp-celery-bench-"))
    base.chmod(0o755)  # the postgres user reaches its data under it
    env = {**os.environ, "CELERY_DIR": str(base), "CELERY_HOSTS": hosts, "CELERY_PG_PORT": str(pg_port),
           "KAFKAPROOF_SUITE": os.environ.get("KAFKAPROOF_SUITE", "smoke"), "KAFKAPROOF_REUSE_CLUSTERS": "false",
           "KAFKAPROOF_RUNS": str(base / "runs"), "KAFKAPROOF_HISTORY_URL": f"sqlite:///{base}/history.sqlite"}
    try:
        script(env, "up")
        wait("the DAG parsed", 300, lambda: sql(pg_port, "select 1 from dag where dag_id = %s", DAG))
        run_id = f"bench_{int(time.time())}"
        busy0, total0 = cpu_busy()
        subprocess.run(["bash", "-c", f'source "{base}/env.sh" && airflow dags trigger {DAG} --run-id {run_id}'],
                       cwd=REPO, env=env, check=True, timeout=180, capture_output=True)
        state = wait("the DAG run", 1800, lambda: next((s for (s,) in sql(
            pg_port, "select state from dag_run where run_id = %s", run_id) if s in ("success", "failed")), None))
        busy1, total1 = cpu_busy()
        start, end = sql(pg_port, "select start_date, end_date from dag_run where run_id = %s", run_id)[0]
        return (end - start).total_seconds(), (busy1 - busy0) / max(1, total1 - total0), state
    finally:
        script(env, "down")
        subprocess.run(["rm", "-rf", str(base)], check=False)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    walls: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for r in range(rounds):
        for arm, hosts in ARMS.items():
            wall, share, state = one_run(hosts)
            walls[arm].append(wall)
            print(f"round {r + 1} {arm:12s} wall {wall:6.1f} s  CPU share {share:4.0%}  ({state})", flush=True)
    one, two = (statistics.median(walls[arm]) for arm in ARMS)
    print(f"median wall: one worker {one:.1f} s, two workers {two:.1f} s; ratio one/two {one / two:.2f} "
          f"on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
