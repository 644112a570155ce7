"""What the fault proxies handed the application's consumers (run/delivered.py): the delivery logs' records read
with the application's identity into `delivered.parquet`, the accepted/delivered/processed comparison, the
recorder over the proxies' control ops, and "not measured (no proxy)" without proxies. The log itself is
tests/unit/proxy/test_deliveries.py; a run through real proxies is tests/cluster/test_app_scenarios.py."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from kafkaproof.proxy.deliveries import DeliveryLog, fetch_deliveries
from kafkaproof.proxy.fake_broker import make_record_batch
from kafkaproof.run.app_ledger import EventDecoder
from kafkaproof.run.app_run import AppRun
from kafkaproof.run.delivered import (NOT_MEASURED_NO_PROXY, DeliveryRecorder, delivered_table, delivery_summary,
                                      measure)
from kafkaproof.spec import ledger
from kafkaproof.spec.application import parse_application, parse_identity
from kafkaproof.spec.ledger import READS, SENDS, make_value_id

pytestmark = pytest.mark.unit

RUN = "r"
JSON_ID = parse_identity({"json_pointer": "/id"}, "application.identity")


def answer(values: list[bytes | None], base_offset: int = 0) -> Any:
    """A decoded Fetch answer's shape around a real record batch of `values` (topic t, partition 0)."""
    part = SimpleNamespace(partition_index=0, error_code=0, records=make_record_batch(values, base_offset))
    return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])


def log_records(*answers: Any) -> list[dict[str, Any]]:
    """The JSON records of a proxy's delivery log that handed these answers over (as `deliveries` reads them)."""
    log = DeliveryLog()
    for i, payload in enumerate(answers):
        log.add(7, "signup-processor", 2, fetch_deliveries(payload, {}, {}), at_ms=1000 + i)
    return log.page(0, 1000)["records"]


def index(n: int) -> dict[str, int]:
    return {f"{RUN}-{i}": make_value_id(0, i) for i in range(n)}


def test_each_record_handed_over_is_a_row_with_the_applications_identity() -> None:
    decoder = EventDecoder(JSON_ID, index(3))
    records = log_records(answer([b'{"id": "r-0"}', b'{"id": "r-1"}', b"not json"]),
                          answer([b'{"id": "r-1"}', b'{"id": "other-9"}'], base_offset=1))
    table = delivered_table(records, decoder)
    assert table.schema == ledger.DELIVERED
    rows = table.to_pylist()
    assert [(r["offset"], r["event_id"], r["value_id"]) for r in rows] == [
        (0, "r-0", 0), (1, "r-1", 1), (2, None, -1), (1, "r-1", 1), (2, "other-9", -1)]
    assert rows[0]["broker"] == 2 and rows[0]["conn"] == 7 and rows[0]["client_id"] == "signup-processor"
    assert rows[3]["delivered_ms"] == 1001 and rows[0]["topic"] == "t"
    assert (decoder.counts.matched, decoder.counts.unreadable, decoder.counts.foreign) == (3, 1, 1)


def delivered(value_ids: list[int]) -> pa.Table:
    return pa.Table.from_pylist([{"value_id": v} for v in value_ids], schema=ledger.DELIVERED)


def test_the_summary_compares_accepted_delivered_and_processed_with_example_ids() -> None:
    names = {make_value_id(0, i): f"{RUN}-{i}" for i in range(10)}
    accepted = set(range(10)) - {9}  # 9: rejected
    handed = delivered([0, 1, 2, 3, 4, 5, 6, 7, 7, 7, -1])  # 7 handed three times (seek back after a failure)
    summary = delivery_summary(accepted, handed, {0, 1, 2, 3, 4, 5, 6}, {8}, names,
                               {"1": {"truncated": False, "unread_batches": 0}}, {"matched": 10}, {})
    assert (summary["measured"], summary["accepted"], summary["delivered"], summary["deliveries"],
            summary["processed"]) == (True, 9, 8, 11, 7)
    assert summary["delivered_not_processed"] == {"count": 1, "examples": ["r-7"]}
    assert summary["never_delivered"] == {"count": 1, "in_log": 1, "examples": ["r-8"]}
    assert summary["processed_not_delivered"]["count"] == 0 and summary["complete"]
    without = delivery_summary(accepted, handed, None, set(), names,
                               {"1": {"truncated": True, "unread_batches": 2}}, {}, {"broker 2": "gone"})
    assert without["processed"] is None and without["delivered_not_processed"] is None
    assert without["truncated"] and without["unread_batches"] == 2 and not without["complete"]


class _Client:
    def __init__(self, proxy: dict[str, Any]) -> None:
        self.proxy = proxy

    def deliveries_start(self, limit: int, topics: list[str]) -> dict[str, Any]:
        if self.proxy.get("down"):
            raise OSError("no such socket")
        self.proxy.update(on=True, topics=topics)
        return {}

    def deliveries(self) -> dict[str, Any]:
        return {"records": list(self.proxy["records"]), "truncated": False, "unread_batches": 0}

    def deliveries_stop(self, clear: bool) -> dict[str, Any]:
        self.proxy["cleared"] = clear
        return {}

    def close(self) -> None:
        pass


def test_the_recorder_reads_every_proxy_it_started_and_names_the_ones_it_could_not(tmp_path) -> None:
    records = log_records(answer([b'{"id": "r-0"}', b'{"id": "r-1"}']))
    proxies = {1: {"records": records}, 2: {"records": []}, 3: {"down": True}}
    cluster = SimpleNamespace(proxy_ids=lambda: [1, 2, 3], proxy_control=lambda nid: _Client(proxies[nid]))
    recorder = DeliveryRecorder(cluster, "t")
    recorder.start()
    assert recorder.started == [1, 2] and proxies[1]["topics"] == ["t"]
    assert "not started" in recorder.problems["broker 3"]
    sends = pa.Table.from_pylist([{"value_id": make_value_id(0, i), "outcome": "ok"} for i in range(3)],
                                 schema=SENDS)
    reads = pa.Table.from_pylist([{"value_id": 0}], schema=READS)
    summary = measure(tmp_path, recorder, EventDecoder(JSON_ID, index(3)), sends, reads, set(), index(3))
    assert proxies[1]["cleared"] and set(summary["proxies"]) == {"1", "2"}
    assert (summary["accepted"], summary["delivered"], summary["processed"]) == (3, 2, 1)
    assert summary["never_delivered"]["examples"] == ["r-2"] and not summary["complete"]
    assert ledger.read_table(tmp_path, "delivered").num_rows == 2
    assert ledger.read_table(tmp_path / "none", "delivered").num_rows == 0  # a side table: absent reads empty
    old = DeliveryRecorder(SimpleNamespace(proxy_ids=lambda: [3], proxy_control=lambda nid: _Client(proxies[3])), "t")
    old.start()  # e.g. a proxy of an older kafkaproof, or gone: nothing read is not a zero
    unread = measure(tmp_path / "old", old, EventDecoder(JSON_ID, index(3)), sends, reads, set(), index(3))
    assert not unread["measured"] and "broker 3: delivery log not started" in unread["reason"]


def test_without_proxies_the_manifest_says_not_measured(tmp_path) -> None:
    section = parse_application({
        "services": [{"name": "web", "command": ["true"], "ready": {"log": "up"}}],
        "drive": {"request": {"url": "http://127.0.0.1:1/e"}, "rate": 10, "messages": 3},
        "identity": {"key": True}}, "app.yaml: application", tmp_path)
    app = AppRun(section, tmp_path, RUN, "app.yaml: application")
    app.record_deliveries(SimpleNamespace(has_proxy=False), "t")
    app.measure_deliveries(pa.Table.from_pylist([], schema=SENDS), None, set())
    assert app.manifest()["delivered"] == {"measured": False, "reason": NOT_MEASURED_NO_PROXY}
    assert not (tmp_path / "delivered.parquet").exists()
