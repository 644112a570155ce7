"""The nightly DAG on Airflow's Celery executor (issue 42), deployed by `scripts/celery.sh`: Redis the broker,
PostgreSQL the metadata database and result backend, a real scheduler and `airflow dags trigger`, and two
Celery workers on this machine standing in for two hosts (their own KAFKAPROOF_HOST, KAFKAPROOF_STATE and
queue kafkaproof-<host>). The subset: the `smoke` suite, whose two scenarios ask for equal clusters; with
cluster reuse off they go one to each host (`batch.place(shared_clusters=False)`)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from support import REPO, free_port, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.long]

DAG = "kafka_reliability_nightly"
GROUPS = {"baseline": "w1", "consumer_crash_commit_before": "w2"}  # round robin over w1, w2 in plan order
KILL_AFTER_S = 6


def celery_ready() -> None:
    """Skip, saying what to install, without the Celery provider, Redis or PostgreSQL (`make celery-setup`)."""
    pytest.importorskip("airflow.providers.celery", reason="make celery-setup (requirements-celery.txt)")
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server: make celery-setup (apt-get install redis-server)")
    if not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        pytest.skip("no PostgreSQL: make setup (apt-get install postgresql)")


class Deployment:
    """`scripts/celery.sh` with a directory and ports of its own; `sql` reads its metadata database."""

    def __init__(self, base: Path, runs: Path) -> None:
        self.base = base
        self.pg_port = free_port()
        self.env = {**os.environ, "CELERY_DIR": str(base), "CELERY_HOSTS": "w1 w2",
                    "CELERY_REDIS_PORT": str(free_port()), "CELERY_PG_PORT": str(self.pg_port),
                    "CELERY_API_PORT": str(free_port()), "KAFKAPROOF_SUITE": "smoke",
                    "KAFKAPROOF_REUSE_CLUSTERS": "false", "KAFKAPROOF_RUNS": str(runs),
                    "KAFKAPROOF_HISTORY_URL": f"sqlite:///{runs}/history.sqlite",
                    # a dead worker's running task is failed after 30 s without heartbeat (Airflow: 300 s)
                    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30"}

    def script(self, *args: str, timeout: float = 900) -> str:
        proc = subprocess.run(["bash", "scripts/celery.sh", *args], cwd=REPO, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0, f"celery.sh {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout + proc.stderr

    def airflow(self, *args: str) -> str:
        proc = subprocess.run(["bash", "-c", f'source "{self.base}/env.sh" && airflow "$@"', "airflow", *args],
                              cwd=REPO, env=self.env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"airflow {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def sql(self, query: str, *params) -> list[tuple]:
        import psycopg2
        with psycopg2.connect(host="127.0.0.1", port=self.pg_port, user="kafkaproof", dbname="airflow",
                              connect_timeout=10) as db, db.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def trigger(self, run_id: str) -> None:
        wait_for(lambda: self.sql("select 1 from dag where dag_id = %s and not is_paused", DAG), 300,
                 f"{DAG} parsed by the dag-processor", interval=2)
        self.airflow("dags", "trigger", DAG, "--run-id", run_id)

    def finished(self, run_id: str, timeout_s: float = 900) -> str:
        return wait_for(lambda: next((s for (s,) in self.sql("select state from dag_run where run_id = %s", run_id)
                                      if s in ("success", "failed")), None), timeout_s, f"DAG run {run_id}", 3)

    def tasks(self, run_id: str) -> dict[str, dict]:
        rows = self.sql("select task_id, map_index, queue, pool, hostname, state, start_date, end_date "
                        "from task_instance where run_id = %s", run_id)
        return {t + (f"[{m}]" if m >= 0 else ""): dict(queue=q, pool=p, hostname=h, state=s, start=b, end=e)
                for t, m, q, p, h, s, b, e in rows}

    def verdicts(self, run_id: str) -> dict[str, str]:
        rows = self.sql("select value from xcom where run_id = %s and task_id = 'judge' and key = 'return_value'",
                        run_id)
        values = [json.loads(v) if isinstance(v, str) else v for (v,) in rows]
        return {v["scenario"]: v["verdict"] for v in values}

    def clusters(self, host: str) -> list[str]:
        listed = "from kafkaproof.cluster import state; print(' '.join(state.list_clusters()))"
        out = subprocess.run(["python", "-c", listed], env={**self.env, "KAFKAPROOF_STATE": str(self.base / f"state-{host}")},
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return out.split()

    def task_log(self, run_id: str, task_id: str) -> str:
        logs = list((self.base / "airflow" / "logs").glob(f"dag_id={DAG}/run_id={run_id}/task_id={task_id}/attempt=1.log"))
        return logs[0].read_text() if logs else ""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    celery_ready()
    base = Path(tempfile.mkdtemp(prefix="kp-celery-"))  # under /tmp: the postgres user must reach its data
    base.chmod(0o755)
    d = Deployment(base, tmp_path_factory.mktemp("runs"))
    try:
        d.script("up")
        yield d
    finally:
        out = d.script("down", timeout=600)
        left = {h: d.clusters(h) for h in GROUPS.values()}
        running = subprocess.run(["pgrep", "-f", str(base)], capture_output=True, text=True).stdout.split()
        shutil.rmtree(base, ignore_errors=True)
        assert left == {"w1": [], "w2": []} and not running, (left, running, out)


def assert_group_on_its_host(tis: dict[str, dict], group: str, host: str, state: str = "success") -> None:
    """Every task of the group ran on the host's queue and worker; its cluster tasks held the host's pool."""
    tasks = {t: ti for t, ti in tis.items() if t.startswith(group + ".")}
    assert len(tasks) >= 3, tis
    assert {ti["queue"] for ti in tasks.values()} == {f"kafkaproof-{host}"}, tasks
    assert {ti["hostname"] for ti in tasks.values()} == {host}, tasks
    for name in ("provision", "run_workload", "teardown_cluster"):
        assert tasks[f"{group}.{name}"]["pool"] == f"kafka_cluster_{host}", tasks
    if state == "success":
        assert {ti["state"] for ti in tasks.values()} == {"success"}, tasks


def test_each_group_runs_on_its_hosts_queue_and_worker_and_both_hosts_run_clusters_at_once(deployment):
    run_id = f"celery_pass_{int(time.time())}"
    started = time.monotonic()
    deployment.trigger(run_id)
    state = deployment.finished(run_id)
    tis = deployment.tasks(run_id)
    assert state == "success", (tis, deployment.task_log(run_id, "gate")[-3000:])
    for group, host in GROUPS.items():
        assert_group_on_its_host(tis, group, host)
    assert tis["analyze"]["pool"] == "default_pool" and tis["analyze"]["state"] == "success"
    assert "reliability gate passed" in deployment.task_log(run_id, "gate")
    a, b = (tis[f"{g}.run_workload"] for g in GROUPS)
    assert a["start"] < b["end"] and b["start"] < a["end"], (a, b)  # both hosts' clusters at the same time
    assert deployment.verdicts(run_id) == {"baseline": "pass", "consumer-crash-commit-before": "pass"}
    print(f"[celery] smoke on two Celery workers: {time.monotonic() - started:.0f} s")


def test_a_worker_killed_mid_group_is_an_error_of_that_group_only_and_cluster_down_heals_its_host(deployment):
    run_id = f"celery_kill_{int(time.time())}"
    group, host = "consumer_crash_commit_before", GROUPS["consumer_crash_commit_before"]
    deployment.trigger(run_id)
    workload = f"{group}.run_workload"
    start = wait_for(lambda: deployment.tasks(run_id).get(workload, {}).get("start"), 600,
                     f"{workload} started", interval=1)
    time.sleep(max(0.0, (start + timedelta(seconds=KILL_AFTER_S) - datetime.now(start.tzinfo)).total_seconds()))
    pid = int((deployment.base / "pids" / f"worker-{host}.pid").read_text())
    os.killpg(pid, signal.SIGKILL)  # the host dies: its worker and the task processes it runs
    wait_for(lambda: deployment.tasks(run_id)[workload]["state"] == "failed", 240,
             f"{workload} failed after its worker died", interval=2)
    # what the dead host left: its cluster, healed by `cluster down --all` there
    assert deployment.clusters(host), "the killed group's cluster should still be up"
    subprocess.run(["python", "-m", "kafkaproof", "cluster", "down", "--all"], check=True, timeout=300,
                   env={**deployment.env, "KAFKAPROOF_STATE": str(deployment.base / f"state-{host}")})
    assert deployment.clusters(host) == []
    deployment.script("worker", host, timeout=300)  # back: its queued teardown runs, the DAG run ends
    state = deployment.finished(run_id)
    tis = deployment.tasks(run_id)
    assert state == "failed" and tis["gate"]["state"] == "failed", tis
    assert_group_on_its_host(tis, "baseline", GROUPS["baseline"])
    assert_group_on_its_host(tis, group, host, state="failed")
    assert deployment.verdicts(run_id) == {"baseline": "pass", "consumer-crash-commit-before": "error"}
