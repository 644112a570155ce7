"""The failed-gate notifier's pure parts: the webhook a connection names, and what it is sent."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkaproof.notify import failure_payload, webhook_url

pytestmark = pytest.mark.unit


def test_the_webhook_url_of_a_connection():
    assert webhook_url("127.0.0.1", 8080, None, {"endpoint": "night"}) == "http://127.0.0.1:8080/night"
    assert webhook_url("https://hooks.example/x", None, None, {}) == "https://hooks.example/x/"
    assert webhook_url("alerts", None, "https", {"endpoint": "/kafka/"}) == "https://alerts/kafka/"
    with pytest.raises(ValueError, match="no host"):
        webhook_url(None, None, None, {})


def test_the_payload_names_where_and_why():
    ti = SimpleNamespace(dag_id="kafka_reliability_nightly", task_id="gate", try_number=1)
    payload = failure_payload({"ti": ti, "dag_run": SimpleNamespace(run_id="scheduled__1"),
                               "exception": RuntimeError("reliability gate failed:\n  baseline: lost")})
    assert payload == {"source": "kafkaproof", "dag_id": "kafka_reliability_nightly", "task_id": "gate",
                       "run_id": "scheduled__1", "try_number": 1,
                       "message": "reliability gate failed:\n  baseline: lost"}


def test_importing_the_helpers_does_not_import_airflow():
    """Airflow's settings bind to the metadata database named when it is first imported: a module the
    DAGs use must not import it before they do (a test collecting it once broke the DAG tests' database)."""
    import subprocess
    import sys
    probe = "import sys, kafkaproof.notify; print('airflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"
