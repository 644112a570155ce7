"""The client matrix: where the clients differ on the same scenario, and the page that shows it (pure)."""
from __future__ import annotations

import pytest

from kafkaproof.report.clients_page import client_columns, render_clients
from kafkaproof.verdict.summary import client_differences

pytestmark = pytest.mark.unit


def summary(scenario, client, verdict="pass", acked=1000, indefinite=0, duplicates=0, p99=200.0):
    return {"scenario": scenario, "label": client, "verdict": verdict, "run_id": f"{scenario}-{client}",
            "metrics": {"outcomes": {"acked": acked, "failed": 0, "indefinite": indefinite},
                        "anomalies": {"duplicates": duplicates, "lost": 0}, "publish_p99_ms": p99, "recovery_s": None}}


def test_differences_name_the_scenario_the_measure_and_each_clients_value():
    summaries = [summary("lost-acks", "librdkafka", verdict="fail", duplicates=72, p99=498.0),
                 summary("lost-acks", "java", duplicates=0, p99=215.0),
                 summary("baseline", "librdkafka"), summary("baseline", "java"),
                 summary("e3", "java", indefinite=435, acked=1065), summary("e3", "librdkafka", indefinite=12, acked=1488),
                 summary("only-one", "java"), None]
    assert client_differences(summaries) == [
        "e3: acked: java 1,065, librdkafka 1,488",
        "e3: indefinite: java 435, librdkafka 12",
        "lost-acks: verdict: java pass, librdkafka fail",
        "lost-acks: duplicates: java 0, librdkafka 72",
        "lost-acks: p99 send→ack: java 215 ms, librdkafka 498 ms"]
    # timings within noise (x1.5 or 50 ms) are not differences
    assert client_differences([summary("baseline", "librdkafka", p99=200.0), summary("baseline", "java", p99=290.0)]) == []


def test_the_page_puts_librdkafka_first_and_leads_with_the_differences(tmp_path):
    summaries = [summary("lost-acks", "java"), summary("lost-acks", "librdkafka", duplicates=72)]
    clients, rows = client_columns(summaries)
    assert clients == ["librdkafka", "java"] and [name for name, _ in rows] == ["lost-acks"]
    html = render_clients(summaries, client_differences(summaries), "manual/1", tmp_path)
    assert "1 difference between librdkafka, java" in html
    assert "lost-acks: duplicates: java 0, librdkafka 72" in html
    assert "acked 1,000 · failed 0 · indefinite 0" in html
