"""Results history (one row per scenario run, behind a SQLAlchemy URL) and regression rules.

Default store: `sqlite:///<runs dir>/history.sqlite`; set `KAFKAPROOF_HISTORY_URL` (e.g.
`postgresql+psycopg2://user:pw@host/db`) for a shared one. Its schema changes go through Alembic
migrations (`migrations/`), applied when kafkaproof first opens a history, so a shared history
survives upgrades of kafkaproof; one made before migrations existed counts as revision 0001.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import sqlalchemy as sa

from ..paths import runs_dir

log = logging.getLogger(__name__)

METADATA = sa.MetaData()
SCENARIO_RUNS = sa.Table(
    "scenario_runs", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scenario", sa.String(100), nullable=False, index=True),
    sa.Column("run_id", sa.String(200), nullable=False, unique=True),
    sa.Column("batch_id", sa.String(200)),  # the DAG run (or CLI batch) this run belongs to
    sa.Column("kafka_version", sa.String(20)),
    sa.Column("client_version", sa.String(40)),
    sa.Column("scenario_hash", sa.String(32)),
    sa.Column("guarantee", sa.String(20)),
    sa.Column("verdict", sa.String(20), nullable=False),  # pass | fail | error
    sa.Column("status", sa.String(20)),  # run status: complete | incomplete | error
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("metrics", sa.Text, nullable=False),  # JSON: the key metrics compared across runs
    sa.Column("report", sa.String(500)),
    sa.Column("label", sa.String(40)),  # in its batch: current/candidate/rolling, or the client of a matrix
    sa.Index("ix_scenario_runs_scenario_finished", "scenario", "finished_at"),
)
MIGRATIONS = Path(__file__).parent / "migrations"
PRE_MIGRATIONS_REVISION = "0001"  # what `create_all` made before the history had migrations
_migrated: set[str] = set()  # URLs this process has brought to the newest revision

# Metrics compared against history (lower is better), from analysis/metrics.json; how each is
# judged is expectations/regression.yaml (kafkaproof.regression).
TRENDED_METRICS = ("recovery_s", "unavailable_s", "publish_p50_ms", "publish_p99_ms")


def history_url() -> str:
    return os.environ.get("KAFKAPROOF_HISTORY_URL") or f"sqlite:///{Path(runs_dir()).resolve() / 'history.sqlite'}"


def engine(url: str | None = None) -> sa.Engine:
    url = url or history_url()
    connect_args = {}
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        # Judge tasks of one night may record at the same time (an executor runs them in parallel).
        connect_args["timeout"] = 60
    eng = sa.create_engine(url, connect_args=connect_args)
    if url not in _migrated:
        try:
            migrate(eng)
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError):
            migrate(eng)  # another process (a judge task beside this one) migrated between our look and change
        _migrated.add(url)
    return eng


def migrate(eng: sa.Engine, revision: str = "head") -> None:
    """Bring the history's schema to `revision` with its Alembic migrations (a new history is made so)."""
    from alembic import command
    from alembic.config import Config
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its per-step chatter; the change is logged below
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        inspector = sa.inspect(conn)
        if inspector.has_table("scenario_runs") and not inspector.has_table("alembic_version"):
            command.stamp(cfg, PRE_MIGRATIONS_REVISION)
        before = _revision(conn)
        command.upgrade(cfg, revision)
        after = _revision(conn)
    if before != after:
        log.info("results history %s: schema %s -> %s", eng.url.render_as_string(hide_password=True),
                 before or "new", after)


def _revision(conn) -> str | None:
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def schema_revision(url: str | None = None) -> str | None:
    """The history's Alembic revision (None for a history without migrations)."""
    with sa.create_engine(url or history_url()).connect() as conn:
        return _revision(conn)


def dig(d: Mapping[str, Any] | None, path: Iterable[str]) -> Any:
    """Nested lookup returning None when any step is missing."""
    cur: Any = d
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


def key_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers kept in history: anomaly counts, outcomes and the trended metrics.

    recovery_s: the longest time, over the run's faults, from injection until acks resumed
    after the last error; unavailable_s: seconds with sends but no ack; publish_p50_ms and
    publish_p99_ms: percentiles of send→ack over the whole run, of publish_samples acks.
    """
    resumes = [f["acks_resume_ms"] for f in metrics.get("faults", []) if f.get("acks_resume_ms") is not None]
    return {
        "recovery_s": max(resumes) / 1000 if resumes else None,
        "unavailable_s": dig(metrics, ("availability", "seconds_unavailable")),
        "publish_p50_ms": dig(metrics, ("latency_ms", "publish", "p50")),
        "publish_p99_ms": dig(metrics, ("latency_ms", "publish", "p99")),
        "publish_samples": dig(metrics, ("latency_ms", "publish", "count")),
        "anomalies": {k: v for k, v in dict(metrics.get("counts", {})).items() if v},
        "outcomes": dict(metrics.get("outcomes", {})),
    }


def record(row: Mapping[str, Any], url: str | None = None) -> None:
    """Append (or replace, by run_id) one scenario run."""
    row = dict(row)
    row.setdefault("finished_at", datetime.now(timezone.utc))
    if not isinstance(row.get("metrics"), str):
        row["metrics"] = json.dumps(row.get("metrics") or {}, sort_keys=True)
    eng = engine(url)
    with eng.begin() as conn:
        conn.execute(SCENARIO_RUNS.delete().where(SCENARIO_RUNS.c.run_id == row["run_id"]))
        conn.execute(SCENARIO_RUNS.insert().values(**row))


def runs(scenario: str | None = None, kafka_version: str | None = None, verdict: str | None = None,
         limit: int = 50, url: str | None = None, before_run_id: str | None = None,
         scenario_hash: str | None = None) -> list[dict]:
    """Most recent runs first, optionally filtered (`scenario_hash`: only runs of that exact configuration)."""
    q = sa.select(SCENARIO_RUNS).order_by(SCENARIO_RUNS.c.finished_at.desc(), SCENARIO_RUNS.c.id.desc()).limit(limit)
    if scenario:
        q = q.where(SCENARIO_RUNS.c.scenario == scenario)
    if kafka_version:
        q = q.where(SCENARIO_RUNS.c.kafka_version == kafka_version)
    if verdict:
        q = q.where(SCENARIO_RUNS.c.verdict == verdict)
    if scenario_hash:
        q = q.where(SCENARIO_RUNS.c.scenario_hash == scenario_hash)
    if before_run_id:
        q = q.where(SCENARIO_RUNS.c.run_id != before_run_id)
    with engine(url).connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    for r in rows:
        r["metrics"] = json.loads(r["metrics"])
    return rows


def format_trend(rows: list[dict]) -> str:
    """A plain-text table of runs, oldest first."""
    lines = [f"{'finished (UTC)':<20} {'scenario':<34} {'hash':<8} {'kafka':<7} {'verdict':<7} {'recovery_s':>10} "
             f"{'unavail_s':>9} {'p99_ms':>8}  anomalies"]
    for r in reversed(rows):
        m = r["metrics"]
        anomalies = ", ".join(f"{k}={v}" for k, v in sorted(m.get("anomalies", {}).items()) if v) or "-"

        def num(v):
            return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
        when = r["finished_at"].strftime("%Y-%m-%d %H:%M:%S") if r["finished_at"] else "?"
        lines.append(f"{when:<20} {r['scenario']:<34} {(r['scenario_hash'] or '-')[:8]:<8} "
                     f"{r['kafka_version'] or '-':<7} {r['verdict']:<7} "
                     f"{num(m.get('recovery_s')):>10} {num(m.get('unavailable_s')):>9} {num(m.get('publish_p99_ms')):>8}  {anomalies}")
    return "\n".join(lines)
