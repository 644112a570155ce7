"""The results history on a real PostgreSQL server, and its schema migrations (Alembic)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from kafkaproof.verdict import history

from support import PostgresServer, airflow_env

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres():
    with PostgresServer() as server:
        yield server


def row(run_id: str, **extra) -> dict:
    return {"scenario": "baseline", "run_id": run_id, "kafka_version": "4.3.1", "verdict": "pass",
            "finished_at": datetime(2026, 11, 24, tzinfo=timezone.utc), "metrics": {"publish_p50_ms": 1.5}, **extra}


def test_the_history_on_postgresql_records_and_reads_like_sqlite(postgres):
    history.record(row("pg-1", label="rolling"), postgres.url)
    history.record(row("pg-1", verdict="fail"), postgres.url)  # replaced, by run_id
    history.record(row("pg-2"), postgres.url)
    rows = history.runs("baseline", url=postgres.url)
    assert sorted((r["run_id"], r["verdict"]) for r in rows) == [("pg-1", "fail"), ("pg-2", "pass")]
    assert rows[0]["metrics"] == {"publish_p50_ms": 1.5}
    assert history.schema_revision(postgres.url) == "0002"


def test_a_shared_history_of_an_older_kafkaproof_survives_the_upgrade(postgres):
    older = postgres.database("older")
    history.migrate(sa.create_engine(older), "0001")  # the schema before labels
    with sa.create_engine(older).begin() as conn:
        conn.execute(sa.text("INSERT INTO scenario_runs (scenario, run_id, verdict, finished_at, metrics) "
                             "VALUES ('baseline', 'old-1', 'pass', now(), '{}')"))
    assert history.schema_revision(older) == "0001"
    history.record(row("new-1", label="candidate"), older)  # this kafkaproof migrates it first
    assert history.schema_revision(older) == "0002"
    rows = {r["run_id"]: r for r in history.runs("baseline", url=older)}
    assert rows["old-1"]["label"] is None and rows["new-1"]["label"] == "candidate"


@pytest.mark.long
@pytest.mark.airflow
def test_airflow_and_the_history_on_postgresql_run_a_dag_like_sqlite(postgres, tmp_path):
    """Airflow's metadata database and kafkaproof's history both on the PostgreSQL server: migrate, run
    the manual DAG end to end, and find the DAG run and the history row there."""
    import json
    import subprocess

    airflow_url, history_url = postgres.database("airflow"), postgres.database("dag_history")
    env = airflow_env(tmp_path / "airflow", AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_url,
                      KAFKAPROOF_RUNS=str(tmp_path / "runs"), KAFKAPROOF_HISTORY_URL=history_url)
    for cmd in (["airflow", "db", "migrate"], ["airflow", "pools", "set", "kafka_cluster", "1", "one cluster"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    r = subprocess.run(["airflow", "dags", "test", "kafka_reliability_manual", "--conf",
                        json.dumps({"scenarios": ["baseline"], "messages": 2000})],
                       env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    with sa.create_engine(airflow_url).connect() as conn:
        states = conn.execute(sa.text("SELECT state FROM dag_run WHERE dag_id = 'kafka_reliability_manual'")).scalars()
        assert list(states) == ["success"]
    (row,) = history.runs("baseline", url=history_url)
    assert row["verdict"] == "pass" and row["batch_id"].startswith("kafka_reliability_manual/")
