"""Application events in the ledger: HTTP requests as sends, identities as value ids, what cannot be judged."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kafkaproof.run.app_ledger import (
    event_index,
    http_error_name,
    not_applicable,
    sends_from_http,
    value_id_of,
)
from kafkaproof.run.http_driver import HTTP_SENDS
from kafkaproof.spec.anomalies import KINDS
from kafkaproof.spec.application import parse_identity
from kafkaproof.spec.ledger import SEND_OUTCOMES, SENDS, make_value_id, split_value_id

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000_000_000


def http_sends(*rows: tuple) -> pa.Table:
    """(seq, event_id, worker, outcome, status, failure, error_message) -> HTTP_SENDS, 1 ms apart."""
    return pa.Table.from_pylist([
        {"seq": seq, "event_id": eid, "worker": worker, "intended_ns": T0 + seq * 1_000_000,
         "send_ns": T0 + seq * 1_000_000 + 10, "complete_ns": T0 + seq * 1_000_000 + 500,
         "outcome": outcome, "status": status, "failure": failure, "error_message": msg}
        for seq, eid, worker, outcome, status, failure, msg in rows], schema=HTTP_SENDS)


TABLE = http_sends(
    (0, "r1-0", 0, "accepted", 200, None, None),
    (1, "r1-1", 1, "rejected", 503, None, '{"error":"not enough replicas"}'),
    (2, "r1-2", 0, "indefinite", None, "timeout", "TimeoutError: timed out"),
    (3, "r1-3", 1, "indefinite", None, "reset", "RemoteDisconnected: closed"),
    (4, "r1-4", 2, "rejected", None, "refused", "ConnectionRefusedError: refused"),
    (5, "r1-5", 0, "accepted", 202, None, None),
)


def test_every_request_becomes_a_send_with_the_applications_outcome():
    sends = sends_from_http(TABLE)
    assert sends.schema == SENDS
    rows = sends.to_pylist()
    assert [r["value_id"] for r in rows] == [make_value_id(0, s) for s in range(6)]
    assert [r["outcome"] for r in rows] == ["ok", "fail", "indefinite", "indefinite", "fail", "ok"]
    assert set(r["outcome"] for r in rows) <= set(SEND_OUTCOMES)
    assert [r["error_name"] for r in rows] == [None, "HTTP 503", "timeout", "reset", "refused", None]
    assert [r["error_code"] for r in rows] == [None, 503, None, None, None, None]
    assert rows[1]["error_message"] == '{"error":"not enough replicas"}'
    assert rows[0]["error_message"] is None
    # Where the event went is unknown: -1 (never known), no offset, no key, no transaction.
    assert {r["partition"] for r in rows} == {-1}
    assert {(r["offset"], r["key"], r["producer_pid"], r["txn_id"], r["txn_outcome"]) for r in rows} == \
        {(None, None, None, None, None)}
    assert [r["send_ns"] for r in rows] == TABLE.column("send_ns").to_pylist()


def test_producer_number_and_clock_offset():
    rows = sends_from_http(TABLE, producer=3, clock_offset_ns=T0).to_pylist()
    assert {split_value_id(r["value_id"])[0] for r in rows} == {3} and {r["producer"] for r in rows} == {3}
    assert rows[2]["intended_ns"] == 2_000_000 and rows[2]["complete_ns"] == 2_000_500


def test_per_worker_producers_keep_value_ids_unique_and_match_the_index():
    sends = sends_from_http(TABLE, per_worker=True).to_pylist()
    assert [r["producer"] for r in sends] == [0, 1, 0, 1, 2, 0]
    assert len({r["value_id"] for r in sends}) == 6
    index = event_index(TABLE, per_worker=True)
    assert [index[f"r1-{r['seq']}"] for r in sends] == [r["value_id"] for r in sends]


def test_an_unknown_outcome_or_a_repeated_event_id_is_refused():
    with pytest.raises(ValueError, match="HTTP_SENDS.outcome: 'maybe'"):
        sends_from_http(http_sends((0, "a", 0, "maybe", None, "timeout", None)))
    with pytest.raises(ValueError, match="'a' was sent twice"):
        event_index(http_sends((0, "a", 0, "accepted", 200, None, None), (1, "a", 0, "accepted", 200, None, None)))


def test_http_error_name():
    assert http_error_name(201, None, "accepted") is None
    assert http_error_name(404, None, "rejected") == "HTTP 404"
    assert http_error_name(None, "refused", "rejected") == "refused"


INDEX = event_index(TABLE)


@pytest.mark.parametrize("identity, key, value, headers", [
    ({"json_pointer": "/id"}, None, json.dumps({"id": "r1-1", "email": "x"}).encode(), None),
    ({"json_pointer": "/event/ids/0"}, None, b'{"event": {"ids": ["r1-1"]}}', None),
    ({"header": "event-id"}, None, b"anything", [("trace", b"t"), ("event-id", b"r1-1")]),
    ({"key": True}, b"r1-1", b"{}", None),
    ({"regex": r"signup id=(\S+)"}, None, b"new signup id=r1-1 at noon", None),
])
def test_identity_decoding_gives_the_events_value_id(identity, key, value, headers):
    decode = value_id_of(parse_identity(identity, "t"), INDEX)
    assert decode(key, value, headers) == make_value_id(0, 1)
    assert decode.counts.as_dict()["matched"] == 1


def test_foreign_and_unreadable_records_decode_to_minus_one_and_are_counted():
    decode = value_id_of(parse_identity({"json_pointer": "/id"}, "t"), INDEX)
    assert decode(None, b'{"id": "r1-5"}', None) == make_value_id(0, 5)
    assert decode(None, b'{"id": "other-run-7"}', None) == -1      # an id, not one of the run's events
    assert decode(None, b'{"id": 99}', None) == -1                  # integer ids read as decimal: still foreign
    assert decode(None, b"kp|r1|5|xxxx", None) == -1                # not JSON
    assert decode(None, b'\xff\xfe', None) == -1                    # not UTF-8
    assert decode(None, None, None) == -1                           # tombstone
    assert decode(None, b'{"name": "no id"}', None) == -1           # pointer missing
    counts = decode.counts.as_dict()
    assert (counts["matched"], counts["foreign"], counts["unreadable"]) == (1, 2, 4)
    assert counts["examples"]["foreign"] == ["other-run-7", "99"]
    assert counts["examples"]["unreadable"][0] == repr(b"kp|r1|5|xxxx")


def test_listed_ids_decode_like_records():
    decode = value_id_of(parse_identity({"key": True}, "t"), INDEX)
    assert [decode.id_value(i) for i in ("r1-0", "zz", None, True, {"id": 1}, "")] == [0, -1, -1, -1, -1, -1]
    assert (decode.counts.matched, decode.counts.foreign, decode.counts.unreadable) == (1, 1, 4)


def test_not_applicable_names_only_anomaly_kinds_each_with_a_reason():
    for processed in (None, "http", "topic", "postgres"):
        out = not_applicable(processed)
        assert set(out) <= set(KINDS) and all(isinstance(r, str) and r for r in out.values())
        # Loss, copies in the log, failed-yet-written and unseen values are judged from sends and the drain.
        assert not {"lost", "duplicates", "aborted_reads", "unseen", "indefinite_landed"} & set(out)


def test_what_a_list_of_processed_ids_cannot_judge():
    out = not_applicable("http")
    assert "not_delivered" not in out and "undelivered_attempts" not in out
    assert "partition and offset" in out["redeliveries"]
    assert "poll order" in out["poll_inversion"] and "poll_skips" in out and "poll_rewinds" in out
    assert "concurrently" in out["reordering"]
    assert {"ack_offset_mismatch", "inconsistent_offsets", "observed_duplicates"} <= set(out)


def test_without_a_processed_source_no_consumer_side_check_applies():
    out = not_applicable(None)
    assert {"not_delivered", "undelivered_attempts", "redeliveries", "reprocessed", "poll_skips"} <= set(out)
    assert out["not_delivered"].startswith("the application exposes nothing")


def test_offsets_and_causal_sends_make_checks_applicable():
    out = not_applicable("http", read_offsets=True, consumer_events=True, send_offsets=True, causal_sends=True)
    assert set(out) == {"lost_unconfirmed", "dirty_reads", "unknown_values"}
    assert list(out) == [k for k in KINDS if k in out]  # report order
