"""The nightly DAG on Airflow's Celery executor: two workers on this machine stand in for two hosts (their own
KAFKAPROOF_HOST and KAFKAPROOF_STATE, one queue each), Redis (Debian's redis-server) the broker (issue 42)."""
from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from datetime import datetime

import pytest

from support import REPO, airflow_env, free_port, stop_group, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.long]

CONSUMER = "consumer-crash-commit-before"


def celery_ready() -> None:
    """Skip, saying what to install, without the Celery provider or a Redis server."""
    pytest.importorskip("airflow.providers.celery", reason="pip install apache-airflow-providers-celery "
                                                           "'celery>=5.5,<5.7' (5.7 breaks provider 3.26)")
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server (apt-get install redis-server)")


def test_the_smoke_suite_on_two_celery_workers_runs_each_group_on_its_hosts_queue(tmp_path):
    celery_ready()
    home, port, redis_port = tmp_path / "airflow", str(free_port()), free_port()
    env = airflow_env(home, AIRFLOW__API__PORT=port,
                      AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
                      AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(home / "logs"),
                      AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
                      AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
                      AIRFLOW__CELERY__BROKER_URL=f"redis://127.0.0.1:{redis_port}/0",
                      AIRFLOW__CELERY__RESULT_BACKEND=f"redis://127.0.0.1:{redis_port}/1",
                      KAFKAPROOF_SUITE="smoke", KAFKAPROOF_RUNS=str(tmp_path / "runs"),
                      KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/history.sqlite",
                      KAFKAPROOF_HOSTS="w1,w2", KAFKAPROOF_HOST_PINS=f"baseline=w1,{CONSUMER}=w2")
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, cmd: list[str], **extra: str) -> None:
        with open(tmp_path / f"{name}.log", "w") as out:
            procs[name] = subprocess.Popen(cmd, env={**env, **extra}, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True, cwd=REPO)

    try:
        start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"])
        subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
        subprocess.run(["bash", "-c", "source scripts/airflow-env.sh && kafkaproof_pools"], env=env, cwd=REPO,
                       check=True, capture_output=True, timeout=120)
        pools = subprocess.run(["airflow", "pools", "list"], env=env, capture_output=True, text=True, timeout=120)
        assert "kafka_cluster_w1" in pools.stdout and "kafka_cluster_w2" in pools.stdout, pools.stdout
        start("api-server", ["airflow", "api-server", "--apps", "execution", "--port", port])
        for host, queues in (("w1", "kafkaproof-w1,default"), ("w2", "kafkaproof-w2")):
            (tmp_path / f"state-{host}").mkdir()
            start(f"worker-{host}", ["airflow", "celery", "worker", "--queues", queues, "--concurrency", "4",
                                     "--skip-serve-logs", "--celery-hostname", f"{host}@%h"],
                  KAFKAPROOF_HOST=host, KAFKAPROOF_STATE=str(tmp_path / f"state-{host}"))
        for host in ("w1", "w2"):
            wait_for(lambda: "ready." in (tmp_path / f"worker-{host}.log").read_text(), 180,
                     f"the Celery worker {host}")
        started = datetime.now()
        run = subprocess.run(["airflow", "dags", "test", "kafka_reliability_nightly", "--use-executor"], env=env,
                             capture_output=True, text=True, timeout=600, cwd=REPO)
        took = (datetime.now() - started).total_seconds()
        log = run.stdout + run.stderr
        workers = {h: (tmp_path / f"worker-{h}.log").read_text() for h in ("w1", "w2")}
        assert run.returncode == 0 and re.search(r"DagRun Finished: .* state=success", log), (
            log[-6000:] + "\n".join(w[-3000:] for w in workers.values()))
        # on Celery a task's output is in its log file, not in `dags test`'s
        gate_log = next((home / "logs").glob("dag_id=kafka_reliability_nightly/run_id=*/task_id=gate/attempt=1.log"))
        assert "reliability gate passed" in gate_log.read_text()
        with sqlite3.connect(home / "airflow.db") as db:
            tis = {t: (q, p, s, b, e) for t, q, p, s, b, e in db.execute(
                "select task_id, queue, pool, state, start_date, end_date from task_instance")}
        # every task of a group on its host's queue, and received by that host's worker only
        for gid, host in (("baseline", "w1"), (CONSUMER.replace("-", "_"), "w2")):
            group = {t: v for t, v in tis.items() if t.startswith(gid + ".")}
            assert len(group) >= 3 and {v[0] for v in group.values()} == {f"kafkaproof-{host}"}, group
            assert all(v[2] == "success" for v in group.values()), group
            other = "w2" if host == "w1" else "w1"
            for task_id in group:
                assert task_id in workers[host] and task_id not in workers[other], (task_id, host)
        assert tis["analyze"][1] == "default_pool" and tis["analyze"][2] == "success"
        # the fault tasks drove their run on its host (a fault task elsewhere fails: run.control.check_same_host)
        assert [v[2] for t, v in tis.items() if "kill_consumer" in t] == ["success", "success"]
        # both hosts ran their cluster at the same time
        b, c = tis["baseline.run_workload"], tis[f"{CONSUMER.replace('-', '_')}.run_workload"]
        assert b[3] < c[4] and c[3] < b[4], (b, c)
        print(f"[celery] nightly smoke on two Celery workers: {took:.0f} s")
    finally:
        for name in reversed(list(procs)):
            stop_group(procs[name], grace_s=60)
        for host in ("w1", "w2"):
            state = tmp_path / f"state-{host}"
            if state.is_dir():
                subprocess.run(["kafkaproof", "cluster", "down", "--all"], env={**env, "KAFKAPROOF_STATE": str(state)},
                               capture_output=True, timeout=300)
    listed = "from kafkaproof.cluster import state; print(state.list_clusters())"
    left = {h: subprocess.run(["python", "-c", listed], env={**env, "KAFKAPROOF_STATE": str(tmp_path / f"state-{h}")},
                              capture_output=True, text=True, timeout=60).stdout.strip() for h in ("w1", "w2")}
    assert left == {"w1": "[]", "w2": "[]"}, left
