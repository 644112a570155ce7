"""The history's schema migrations on SQLite: a new history, and one kafkaproof made before migrations."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from kafkaproof.verdict import history

pytestmark = pytest.mark.unit


def test_a_new_history_is_made_by_the_migrations(tmp_path):
    url = f"sqlite:///{tmp_path}/h.sqlite"
    history.record({"scenario": "s", "run_id": "r1", "verdict": "pass", "metrics": {}, "label": "rolling"}, url)
    assert history.schema_revision(url) == "0002"
    assert history.runs("s", url=url)[0]["label"] == "rolling"


def test_a_history_from_before_migrations_is_taken_as_0001_and_upgraded_with_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path}/old.sqlite"
    eng = sa.create_engine(url)
    with eng.begin() as conn:  # what kafkaproof's create_all made before migrations
        conn.execute(sa.text(
            "CREATE TABLE scenario_runs (id INTEGER PRIMARY KEY AUTOINCREMENT, scenario VARCHAR(100) NOT NULL, "
            "run_id VARCHAR(200) NOT NULL UNIQUE, batch_id VARCHAR(200), kafka_version VARCHAR(20), "
            "client_version VARCHAR(40), scenario_hash VARCHAR(32), guarantee VARCHAR(20), verdict VARCHAR(20) "
            "NOT NULL, status VARCHAR(20), finished_at DATETIME NOT NULL, metrics TEXT NOT NULL, report VARCHAR(500))"))
        conn.execute(sa.text("CREATE INDEX ix_scenario_runs_scenario ON scenario_runs (scenario)"))
    with eng.begin() as conn:
        conn.execute(sa.text("INSERT INTO scenario_runs (scenario, run_id, verdict, finished_at, metrics) "
                             "VALUES ('s', 'old', 'pass', :t, '{}')"), {"t": datetime(2026, 1, 1, tzinfo=timezone.utc)})
    assert history.schema_revision(url) is None
    (r,) = history.runs("s", url=url)
    assert r["run_id"] == "old" and r["label"] is None
    assert history.schema_revision(url) == "0002"
