"""The share-group ledger (issue 46): registered with the ledger, optional, written and read back."""
from __future__ import annotations

import pytest

from kafkaproof.spec import ledger
from kafkaproof.spec.share_ledger import SHARE_TABLES

pytestmark = pytest.mark.unit


def test_the_share_tables_are_optional_ledger_tables():
    assert set(SHARE_TABLES) <= set(ledger.TABLES) and set(SHARE_TABLES) <= set(ledger.OPTIONAL_TABLES)


def test_a_run_without_them_reads_them_empty_and_a_delivery_round_trips(tmp_path):
    assert ledger.read_table(tmp_path, "share_deliveries").num_rows == 0
    row = {"delivery_id": 7, "consumer": 0, "consumer_pid": 99, "partition": 1, "offset": 5, "value_id": 3,
           "delivery_count": 2, "acquired_ns": 10}
    assert ledger.write_table(tmp_path, "share_deliveries", [row]) == 1
    assert ledger.read_table(tmp_path, "share_deliveries").to_pylist() == [row]


def test_the_schema_doc_names_every_share_table():
    doc = (ledger.Path(__file__).parents[3] / "docs" / "ledger-schema.md").read_text()
    assert all(f"`{t}.parquet`" in doc for t in SHARE_TABLES)
