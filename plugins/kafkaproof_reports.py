"""kafkaproof's Airflow plugin: every run report and batch page, served inside the Airflow UI.

The api-server mounts `reports_app` at /kafkaproof (the runs directory, `$KAFKAPROOF_RUNS`, as
static files, and an index of the batches newest first); the UI gets a "kafkaproof reports"
entry that opens it, and every task of kafkaproof's DAGs an extra link "kafkaproof reports" to its
DAG run's summary page. The library itself (plugins/kafkaproof/) is a package, kept out of Airflow's
plugin scan by plugins/.airflowignore.
"""
from __future__ import annotations

import html
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from kafkaproof.paths import runs_dir
from kafkaproof.report.batch_page import safe_batch_id

URL_PREFIX = "/kafkaproof"
KAFKAPROOF_DAGS = ("kafka_reliability_nightly", "kafka_reliability_manual", "kafka_upgrade_check")


def batch_index(runs: Path) -> str:
    """The index page: each batch (a DAG run or `kafkaproof batch`) newest first, and the latest run reports."""
    batches = sorted((d for d in (runs / "batches").glob("*") if (d / "index.html").exists()),
                     key=lambda d: (d / "index.html").stat().st_mtime, reverse=True)
    reports = sorted((d for d in runs.glob("*") if (d / "report" / "index.html").exists()),
                     key=lambda d: (d / "report" / "index.html").stat().st_mtime, reverse=True)[:50]

    def items(paths: list[Path], href) -> str:
        return "".join(f'<li><a href="{html.escape(href(p))}">{html.escape(p.name)}</a></li>' for p in paths) or \
            "<li>none yet</li>"
    return ("<!doctype html><meta charset=utf-8><title>kafkaproof reports</title>"
            "<style>body{font:14px/1.45 system-ui,sans-serif;margin:2em}</style>"
            f"<h1>kafkaproof reports</h1><p>from {html.escape(str(runs.resolve()))}</p>"
            f"<h2>Batches</h2><ul>{items(batches, lambda d: f'batches/{d.name}/index.html')}</ul>"
            f"<h2>Latest runs</h2><ul>{items(reports, lambda d: f'{d.name}/report/index.html')}</ul>")


def reports_app(runs: Path | None = None) -> FastAPI:
    """The FastAPI app serving a runs directory: `/` the index, anything else the files under it."""
    runs = Path(runs or runs_dir())
    app = FastAPI(title="kafkaproof reports")

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        if not runs.is_dir():
            raise HTTPException(404, f"no runs directory {runs} (set KAFKAPROOF_RUNS)")
        return batch_index(runs)

    app.mount("/", StaticFiles(directory=runs, html=True, check_dir=False), name="runs")
    return app


def batch_page_url(dag_id: str, run_id: str) -> str:
    """Where the plugin serves a DAG run's summary page (the batch id of a DAG run is `dag_id/run_id`)."""
    return f"{URL_PREFIX}/batches/{safe_batch_id(f'{dag_id}/{run_id}')}/index.html"


class BatchPageLink(BaseOperatorLink):
    """"kafkaproof reports" on every task of kafkaproof's DAGs: the DAG run's summary page, which links
    each scenario's report (empty for other DAGs' tasks)."""

    name = "kafkaproof reports"

    def get_link(self, operator, *, ti_key) -> str:
        return batch_page_url(ti_key.dag_id, ti_key.run_id) if ti_key.dag_id in KAFKAPROOF_DAGS else ""


class KafkaproofReportsPlugin(AirflowPlugin):
    """Reports and batch pages inside the Airflow UI."""

    name = "kafkaproof"
    fastapi_apps = [{"app": reports_app(), "url_prefix": URL_PREFIX, "name": "kafkaproof reports"}]
    external_views = [{"name": "kafkaproof reports", "href": f"{URL_PREFIX}/", "destination": "nav",
                       "url_route": "kafkaproof", "category": "browse"}]
    global_operator_extra_links = [BatchPageLink()]
