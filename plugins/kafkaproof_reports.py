"""kafkaproof's Airflow plugin: every run report and batch page, served inside the Airflow UI.

The api-server mounts `reports_app` at /kafkaproof (the runs directory, `$KAFKAPROOF_RUNS`, as
static files, and an index of the batches newest first) and the UI gets a "kafkaproof reports"
entry that opens it. The library itself (plugins/kafkaproof/) is a package, kept out of Airflow's
plugin scan by plugins/.airflowignore.
"""
from __future__ import annotations

import html
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from kafkaproof.paths import runs_dir

URL_PREFIX = "/kafkaproof"


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


class KafkaproofReportsPlugin(AirflowPlugin):
    """Reports and batch pages inside the Airflow UI."""

    name = "kafkaproof"
    fastapi_apps = [{"app": reports_app(), "url_prefix": URL_PREFIX, "name": "kafkaproof reports"}]
    external_views = [{"name": "kafkaproof reports", "href": f"{URL_PREFIX}/", "destination": "nav",
                       "url_route": "kafkaproof", "category": "browse"}]
