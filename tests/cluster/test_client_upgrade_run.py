"""A client upgrade end to end (docs/upgrades.md "Client upgrades"): `kafkaproof upgrade-check --client-upgrade`
runs `baseline` with the Java clients on kafka-clients 3.9.2 and on 4.3.1 against 4.3.1 brokers (only the
clients change), analyses both in one spark-submit, and the page lists the defaults that differ."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaproof.verdict import history

pytestmark = [pytest.mark.cluster, pytest.mark.java, pytest.mark.spark, pytest.mark.long, pytest.mark.timeout(480)]


def test_a_client_upgrade_runs_either_client_version_and_lists_the_defaults_that_differ(tmp_path):
    url = f"sqlite:///{tmp_path}/h.sqlite"
    env = {**os.environ, "KAFKAPROOF_RUNS": str(tmp_path / "runs"), "KAFKAPROOF_HISTORY_URL": url}
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "upgrade-check", "--scenario", "baseline",
                        "--current", "4.3.1", "--candidate", "4.3.1", "--client-upgrade", "3.9.2:4.3.1",
                        "--messages", "2000", "--batch-id", "test/client-upgrade"],
                       env=env, capture_output=True, text=True, timeout=450)
    log = r.stdout + r.stderr
    assert r.returncode in (0, 1), log[-6000:]  # 1: the candidate measured worse (timings on a busy host)
    rows = history.runs("baseline", url=url)
    assert sorted((row["label"], row["verdict"]) for row in rows) == [("candidate", "pass"), ("current", "pass")]
    (page,) = [line.split("upgrade report:", 1)[1].strip() for line in log.splitlines() if "upgrade report:" in line]
    html = Path(page).read_text()
    assert "kafka-clients 3.9.2 → 4.3.1: defaults read from the two jars" in html
    assert "producer linger.ms default 0 → 5 (not set by the scenario)" in html  # baseline leaves linger.ms alone
    assert "producer 0: kafka-clients 3.9.2" in html and "producer 0: kafka-clients 4.3.1" in html
