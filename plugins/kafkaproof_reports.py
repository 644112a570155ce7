"""kafkaproof's Airflow plugin: every run report and batch page, served inside the Airflow UI.

The api-server mounts `reports_app` at /kafkaproof (the runs directory, `$KAFKAPROOF_RUNS`, as
static files, and an index of the batches and the audits newest first); the UI gets a "kafkaproof reports"
entry that opens it, and every task of kafkaproof's DAGs an extra link "kafkaproof reports" to its
DAG run's summary page (the audit DAG's: its audit.html); it also registers the scheduled DAGs' timetable.
The library itself (plugins/kafkaproof/) is a package, kept out of Airflow's plugin scan by
plugins/.airflowignore.

Airflow does not authenticate a plugin's FastAPI app: every route here does it itself, as Airflow's
core API does (`airflow.api_fastapi.core_api.security`: the auth manager's JWT from the
`Authorization: Bearer` header or the UI's `_token` cookie), and authorises it against read access
to kafkaproof's DAGs (`requires_access_dag("GET")`). No token: 401; a token the auth manager does
not accept: 403 (401 when expired); a user who may read none of kafkaproof's DAGs: 403. A DAG run's
batch page (`batches/<dag_id>_<run_id>…`) needs read access to that DAG, an audit (`audits/…`) read access
to the audit DAG; the index lists the batches of the DAGs the caller may read, and the audits when the
caller may read the audit DAG; run directories, which no DAG owns, need read access to any of them.
"""
from __future__ import annotations

import html
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from kafkaproof.paths import runs_dir
from kafkaproof.report.audit_page import AUDITS_DIR, PAGE as AUDIT_PAGE, audit_dir_name, list_audits
from kafkaproof.report.batch_page import safe_batch_id
from kafkaproof.schedule import NoMissedRunsTimetable

URL_PREFIX = "/kafkaproof"
AUDIT_DAG = "kafka_cluster_audit"
KAFKAPROOF_DAGS = ("kafka_reliability_nightly", "kafka_reliability_manual", "kafka_upgrade_check",
                   "kafka_reliability_soak", AUDIT_DAG)
_bearer = HTTPBearer(auto_error=False)


def _security():
    """Airflow's core API security module, imported on the first request: the api-server serves this
    app, but every Airflow process imports the plugin (the extra link), and that import costs seconds."""
    from airflow.api_fastapi.core_api import security
    return security


async def current_user(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)):
    """The caller, authenticated as Airflow's core API does it (`security.get_user`: the bearer token,
    else the UI's cookie). 401 without a token, 403 for one the auth manager does not accept."""
    return await _security().get_user(request, None, credentials)


def readable_dags(request: Request, user=Depends(current_user)) -> frozenset[str]:
    """kafkaproof's DAGs the caller may read (`security.requires_access_dag("GET")`, each DAG by id);
    403 when none."""
    security = _security()
    readable = set()
    for dag_id in KAFKAPROOF_DAGS:
        try:
            security.requires_access_dag("GET", param_dag_id=dag_id)(request, user)
        except HTTPException as e:
            if e.status_code != 403:
                raise
        else:
            readable.add(dag_id)
    if not readable:
        raise HTTPException(403, "Forbidden: kafkaproof's reports are for users who may read its DAGs "
                                 f"({', '.join(KAFKAPROOF_DAGS)})")
    return frozenset(readable)


def batch_dag(batch_dir_name: str) -> str | None:
    """The kafkaproof DAG whose run a batch directory belongs to (`safe_batch_id` of `dag_id/run_id`
    starts with `dag_id_`), or None (a `kafkaproof batch` or `report --night` batch)."""
    for dag_id in sorted(KAFKAPROOF_DAGS, key=len, reverse=True):
        if batch_dir_name.startswith(f"{dag_id}_"):
            return dag_id
    return None


def audits_section(runs: Path) -> str:
    """The index's "Audits" section: each audit under `runs`/audits newest first (`list_audits`): its id,
    the cluster, the verdict, when it finished, a link to its audit.html."""
    def item(a: dict) -> str:
        name = html.escape(a["audit_id"])
        href = html.escape(f"{AUDITS_DIR}/{a['dir']}/{AUDIT_PAGE}")
        title = f'<a href="{href}">{name}</a>' if a["page"] else f"{name} (no audit.html yet)"
        return (f"<li>{title} · {html.escape(a['bootstrap'])} · <strong>{html.escape(a['verdict'])}</strong>"
                f" · finished {html.escape(a['finished'])}</li>")
    rows = "".join(item(a) for a in list_audits(runs))
    return f"<h2>Audits</h2><ul>{rows or '<li>none yet</li>'}</ul>"


def batch_index(runs: Path, readable: frozenset[str] | set[str] = frozenset(KAFKAPROOF_DAGS)) -> str:
    """The index page: each batch (a DAG run or `kafkaproof batch`) newest first, the audits (when the audit
    DAG is in `readable`) and the latest run reports; a DAG run's batch only when its DAG is in `readable`."""
    batches = sorted((d for d in (runs / "batches").glob("*") if (d / "index.html").exists()
                      and batch_dag(d.name) in {None, *readable}),
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
            + (audits_section(runs) if AUDIT_DAG in readable else "") +
            f"<h2>Latest runs</h2><ul>{items(reports, lambda d: f'{d.name}/report/index.html')}</ul>")


def reports_app(runs: Path | None = None) -> FastAPI:
    """The FastAPI app serving a runs directory: `/` the index, anything else the files under it; every
    route only to a caller who may read a kafkaproof DAG (`readable_dags`), a DAG run's batch page only
    to one who may read that DAG."""
    runs = Path(runs or runs_dir())
    app = FastAPI(title="kafkaproof reports")
    files = StaticFiles(directory=runs, html=True, check_dir=False)

    @app.get("/", response_class=HTMLResponse)
    def index(readable: frozenset[str] = Depends(readable_dags)) -> str:
        if not runs.is_dir():
            raise HTTPException(404, f"no runs directory {runs} (set KAFKAPROOF_RUNS)")
        return batch_index(runs, readable)

    @app.api_route("/{path:path}", methods=["GET", "HEAD"])
    async def file(path: str, request: Request, readable: frozenset[str] = Depends(readable_dags)) -> Response:
        """A file under the runs directory (a directory: its index.html), as StaticFiles serves it (no path
        outside the directory, no symlink out of it)."""
        relative = files.get_path(request.scope)  # normalised: `x/../batches/…` is checked as `batches/…`
        parts = Path(relative).parts
        if len(parts) > 1 and parts[0] == "batches" and batch_dag(parts[1]) not in {None, *readable}:
            raise HTTPException(403, f"Forbidden: this batch belongs to DAG {batch_dag(parts[1])}, "
                                     "which you may not read")
        if len(parts) > 1 and parts[0] == AUDITS_DIR and AUDIT_DAG not in readable:
            raise HTTPException(403, f"Forbidden: audits are for users who may read DAG {AUDIT_DAG}")
        return await files.get_response(relative, request.scope)

    return app


def batch_page_url(dag_id: str, run_id: str) -> str:
    """Where the plugin serves a DAG run's summary page (the batch id of a DAG run is `dag_id/run_id`)."""
    return f"{URL_PREFIX}/batches/{safe_batch_id(f'{dag_id}/{run_id}')}/index.html"


def audit_page_url(run_id: str) -> str:
    """Where the plugin serves the audit page of a run of the audit DAG (`pipeline.audit_out`)."""
    return f"{URL_PREFIX}/{AUDITS_DIR}/{audit_dir_name(run_id)}/{AUDIT_PAGE}"


class BatchPageLink(BaseOperatorLink):
    """"kafkaproof reports" on every task of kafkaproof's DAGs: the DAG run's summary page, which links
    each scenario's report; the audit DAG's audit.html (empty for other DAGs' tasks)."""

    name = "kafkaproof reports"

    def get_link(self, operator, *, ti_key) -> str:
        if ti_key.dag_id == AUDIT_DAG:
            return audit_page_url(ti_key.run_id)
        return batch_page_url(ti_key.dag_id, ti_key.run_id) if ti_key.dag_id in KAFKAPROOF_DAGS else ""


class KafkaproofReportsPlugin(AirflowPlugin):
    """Reports and batch pages inside the Airflow UI."""

    name = "kafkaproof"
    fastapi_apps = [{"app": reports_app(), "url_prefix": URL_PREFIX, "name": "kafkaproof reports"}]
    external_views = [{"name": "kafkaproof reports", "href": f"{URL_PREFIX}/", "destination": "nav",
                       "url_route": "kafkaproof", "category": "browse"}]
    global_operator_extra_links = [BatchPageLink()]
    timetables = [NoMissedRunsTimetable]  # the scheduled DAGs' (kafkaproof.schedule)
