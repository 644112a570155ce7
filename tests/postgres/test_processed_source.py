"""What an application processed, read from a real PostgreSQL server by a query (`processed.postgres_fetch`)."""
from __future__ import annotations

from datetime import datetime, timezone

import psycopg2
import pytest

from kafkaproof.run.app_ledger import value_id_of
from kafkaproof.run.processed import ProcessedPoller, postgres_fetch
from kafkaproof.spec.application import parse_identity

from support import PostgresServer

pytestmark = pytest.mark.postgres

INDEX = {f"u-{i}": 500 + i for i in range(5)}
AT = datetime(2026, 11, 26, 20, 0, tzinfo=timezone.utc)


def test_a_query_lists_what_was_processed_with_its_processing_time():
    with PostgresServer() as server:
        dsn = f"host={server.base} port={server.port} user=kafkaproof dbname=kafkaproof"
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("create table processed (id text, processed_at timestamptz)")
            cur.execute("insert into processed values ('u-0', %s), ('u-1', %s)", (AT, AT))
        decoder = value_id_of(parse_identity({"key": True}, "t"), INDEX)
        poller = ProcessedPoller(postgres_fetch(dsn, "select id, processed_at from processed order by 2"),
                                 decoder, clock_offset_ns=10**18)
        assert poller.poll() == 2
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("insert into processed values ('u-1', %s), ('nobody', null)", (AT,))
        assert poller.poll() == 2  # u-1 processed a second time; an id that is not an event
        rows = poller.table().to_pylist()
        assert [r["value_id"] for r in rows] == [500, 501, 501, -1]
        assert rows[0]["read_ns"] == int(AT.timestamp()) * 10**9 - 10**18
        bad = ProcessedPoller(postgres_fetch(dsn, "select nothing from nowhere"), decoder)
        assert bad.poll() == 0 and "postgres query failed" in bad.stats.last_error
    down = ProcessedPoller(postgres_fetch(dsn, "select 1", timeout_s=2), decoder)
    assert down.poll() == 0 and "cannot connect" in down.stats.last_error
