"""The run page's header and environment section name every producer's and consumer's client and exact version."""
from __future__ import annotations

import json
import re

import pytest

from kafkaproof.report import run_page

from report_runs import history_url, make_run, section, text_of  # noqa: F401  (history_url: a fixture)

pytestmark = pytest.mark.unit


def _header(page: str) -> str:
    return text_of(re.search(r'<div class="sub">(.*?)</div>', page, re.S).group(1))


def test_a_java_producer_and_python_consumer_run_names_both_clients(tmp_path, history_url):
    rd = make_run(tmp_path)
    m = json.loads((rd / "manifest.json").read_text())
    m["versions"]["confluent_kafka"] = "2.16.1"
    m["client_versions"] = {
        "producers": [{"index": 0, "client": "java", "libraries": [{"name": "kafka-clients", "version": "3.9.2"}]}],
        "consumers": [{"index": i, "client": "librdkafka",
                       "libraries": [{"name": "confluent-kafka", "version": "2.16.1"},
                                     {"name": "librdkafka", "version": "2.16.0"}]} for i in (0, 1)]}
    (rd / "manifest.json").write_text(json.dumps(m))
    page = run_page.write_run_report(rd, examples=3, history_url=history_url).read_text()
    header = _header(page)
    assert "Kafka 4.3.1 · producer 0: kafka-clients 3.9.2 · consumers 0-1: confluent-kafka 2.16.1, " \
           "librdkafka 2.16.0 · status complete" in header
    cluster = text_of(section(page, "cluster"))
    assert "producer 0: kafka-clients 3.9.2; consumers 0-1: confluent-kafka 2.16.1, librdkafka 2.16.0" in cluster


def test_an_older_run_still_renders_its_clients(tmp_path, history_url):
    """The golden manifest predates `client_versions` (and recorded confluent_kafka as '2')."""
    page = run_page.write_run_report(make_run(tmp_path), examples=3, history_url=history_url).read_text()
    assert "Kafka 4.3.1 · producer 0: librdkafka 2.16.0 · status complete" in _header(page)
