"""Telling people about a failed gate: an Airflow notifier posting the problems to a webhook.

The webhook is an Airflow connection (`kafkaproof_notify` by default, any conn type: `host` as a URL,
or `schema`://`host`:`port`, plus Extra `endpoint`), so it is configured where Airflow users
configure every other endpoint. Without that connection nothing is sent (and the log says so).
Used as the `on_failure_callback` of the DAGs' gate tasks.
"""
from __future__ import annotations

import functools
import json
import logging
import urllib.request
from typing import Any, Mapping

log = logging.getLogger(__name__)

NOTIFY_CONN_ID = "kafkaproof_notify"


def webhook_url(host: str | None, port: int | None, schema: str | None, extra: Mapping[str, Any]) -> str:
    """Pure: the URL a connection names (`host` may be a whole URL; `endpoint` in Extra is its path)."""
    if not host:
        raise ValueError("the connection has no host")
    base = host if "://" in host else f"{schema or 'http'}://{host}{f':{port}' if port else ''}"
    endpoint = str(extra.get("endpoint") or "")
    return base.rstrip("/") + ("/" + endpoint.lstrip("/") if endpoint else "/")


def failure_payload(context: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: what the webhook receives: where it failed and why (the gate's own message, with its problems
    and the summary page)."""
    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    return {"source": "kafkaproof", "dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
            "run_id": getattr(dag_run, "run_id", None) or context.get("run_id"),
            "try_number": getattr(ti, "try_number", None), "message": str(context.get("exception") or "failed")}


def __getattr__(name: str):
    # The notifier class is made on first use: importing this module (its pure helpers) must not import
    # Airflow, whose settings bind to the metadata database named at that moment.
    if name == "WebhookNotifier":
        return _webhook_notifier_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _webhook_notifier_class() -> type:
    from airflow.sdk import BaseHook, BaseNotifier

    class WebhookNotifier(BaseNotifier):
        """Posts `failure_payload` as JSON to the connection's webhook."""

        template_fields = ("conn_id",)

        def __init__(self, conn_id: str = NOTIFY_CONN_ID, timeout_s: float = 10.0):
            super().__init__()
            self.conn_id, self.timeout_s = conn_id, timeout_s

        def notify(self, context) -> None:
            try:
                conn = BaseHook.get_connection(self.conn_id)
            except Exception as e:  # not configured: nobody asked to be told
                log.info("no failure notification: connection %r is not defined (%s)", self.conn_id, e)
                return
            url = webhook_url(conn.host, conn.port, conn.schema, conn.extra_dejson or {})
            body = json.dumps(failure_payload(context)).encode()
            request = urllib.request.Request(url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                log.info("failure notification sent to %s (HTTP %s)", url, response.status)

    WebhookNotifier.__module__, WebhookNotifier.__qualname__ = __name__, "WebhookNotifier"
    return WebhookNotifier
