"""Ledger assembly and crash-safe streams, without a cluster."""
from __future__ import annotations

import json

import pytest

from kafkaproof.spec import ledger
from kafkaproof.run.assemble import assemble_sends, fault_rows
from kafkaproof.run.workload import COMPLETION_STREAM, SEND_STREAM, TXN_STREAM, StreamWriter, read_stream

pytestmark = pytest.mark.unit


def test_stream_cut_short_by_a_crash_keeps_complete_batches(tmp_path):
    path = tmp_path / "s.arrow"
    w = StreamWriter(path, TXN_STREAM)
    for i in range(3):
        w.append(0, i, "commit")
    w.flush()
    w.append(0, 3, "abort")
    w.flush()
    w.sink.flush()
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a SIGKILL in the middle of the last write
    table = read_stream(path, TXN_STREAM)
    assert table.column("txn_id").to_pylist() == [0, 1, 2]
    assert read_stream(tmp_path / "missing.arrow", TXN_STREAM).num_rows == 0


def _write(path, schema, rows):
    w = StreamWriter(path, schema)
    for r in rows:
        w.append(*r)
    w.close()


def test_assemble_sends_outcomes_and_a_dead_producers_values(tmp_path):
    vid = [ledger.make_value_id(0, s) for s in range(4)]
    _write(tmp_path / "producer-0.sends.arrow", SEND_STREAM,
           [(vid[s], 0, 99, s, "k", 10 + s, 11 + s, None) for s in range(3)])
    _write(tmp_path / "producer-0.completions.arrow", COMPLETION_STREAM,
           [(vid[0], 20, 0, 5, None, None, None), (vid[1], 21, 0, None, 7, "REQUEST_TIMED_OUT", "Broker: Request timed out")])
    _write(tmp_path / "producer-0.txns.arrow", TXN_STREAM, [])
    # vid[3] was never recorded as sent (the producer died) but is in the log.
    table = assemble_sends(tmp_path, 1, audit_value_ids={vid[0], vid[3]})
    rows = {r["value_id"]: r for r in table.to_pylist()}
    assert table.schema == ledger.SENDS
    assert rows[vid[0]]["outcome"] == "ok" and rows[vid[0]]["offset"] == 5
    assert rows[vid[1]]["outcome"] == "indefinite" and rows[vid[1]]["error_name"] == "REQUEST_TIMED_OUT"
    assert rows[vid[1]]["error_message"] == "Broker: Request timed out" and rows[vid[0]]["error_message"] is None
    assert rows[vid[2]]["outcome"] == "indefinite" and rows[vid[2]]["complete_ns"] is None  # no ack before the end
    assert rows[vid[3]]["outcome"] == "indefinite" and rows[vid[3]]["send_ns"] == -1 and rows[vid[3]]["seq"] == 3


def test_fault_rows_pair_inject_and_heal(tmp_path):
    log = tmp_path / "faults.jsonl"
    events = [{"event": "inject", "fault_id": "a", "kind": "kill", "target": "leader:0", "nodes": [2],
               "params": {}, "mono_ns": 5, "wall": "w1"},
              {"event": "heal", "fault_id": "a", "kind": "kill", "target": "leader:0", "nodes": [2],
               "params": {}, "mono_ns": 9, "wall": "w2"},
              {"event": "inject", "fault_id": "b", "kind": "pause", "target": "node:1", "nodes": [1],
               "params": {"x": 1}, "mono_ns": 7, "wall": "w3"}]
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    rows = fault_rows(log)
    assert [(r["fault_id"], r["heal_ns"]) for r in rows] == [("a", 9), ("b", None)]
    assert ledger.write_table(tmp_path, "faults", rows) == 2


def test_audit_summary_is_keyed_by_partition():
    from kafkaproof.run.drain import audit_summary
    marks = {"read_uncommitted": {"0": {"low": 0, "high": 10, "complete": True, "read": 10}},
             "read_committed": {"0": {"low": 0, "high": 10, "complete": False, "read": 7}}}
    assert audit_summary(marks) == {"partitions": {"0": {"low": 0, "high": 10, "complete": False,
                                                         "read_read_uncommitted": 10, "read_read_committed": 7}},
                                    "isolations": ["read_committed", "read_uncommitted"]}


def test_acks0_offsets_never_reach_the_ledger(tmp_path):
    vid = [ledger.make_value_id(0, s) for s in range(2)]
    _write(tmp_path / "producer-0.sends.arrow", SEND_STREAM, [(vid[s], 0, 99, s, None, 10 + s, 11 + s, None) for s in range(2)])
    # librdkafka's acks=0 reports: offsets counted from 0 per batch, assigned by no broker
    _write(tmp_path / "producer-0.completions.arrow", COMPLETION_STREAM, [(vid[0], 20, 0, 0, None, None, None),
                                                                          (vid[1], 21, 0, 1, None, None, None)])
    _write(tmp_path / "producer-0.txns.arrow", TXN_STREAM, [])
    table = assemble_sends(tmp_path, 1, set(), offsets_from_broker=False)
    assert table.column("outcome").to_pylist() == ["ok", "ok"]
    assert table.column("offset").to_pylist() == [None, None]


def test_fault_rows_carry_what_each_fault_did(tmp_path):
    log = tmp_path / "faults.jsonl"
    events = [{"event": "inject", "fault_id": "a", "kind": "isolate", "target": "node:1", "nodes": [1],
               "params": {}, "mono_ns": 5, "wall": "w1", "effect": {}, "annotations": {"scenario_index": 2}},
              {"event": "heal", "fault_id": "a", "kind": "isolate", "target": "node:1", "nodes": [1],
               "params": {}, "mono_ns": 9, "wall": "w2", "dropped_packets": 12, "dropped_bytes": 900}]
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (row,) = fault_rows(log)
    assert json.loads(row["effect"]) == {"scenario_index": 2, "dropped_packets": 12, "dropped_bytes": 900}


def test_worker_events_wake_a_trigger_on_the_next_commit():
    import socket
    import threading
    from kafkaproof.run.workers import WorkerEvents
    events = WorkerEvents()
    try:
        stop = threading.Event()
        host, port = events.address.split(":")
        seen = events.count("commit", 0)
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        threading.Timer(0.2, lambda: sender.sendto(
            json.dumps({"consumer": 0, "event": "commit"}).encode(), (host, int(port)))).start()
        assert events.wait_next("commit", 0, seen, timeout_s=5, stop=stop)
        assert events.count("commit", 0) == seen + 1
        assert not events.wait_next("commit", 1, 0, timeout_s=0.3, stop=stop)
    finally:
        events.close()


def test_the_producers_payloads_are_the_ledgers_encoding_and_decode_back():
    from kafkaproof.run.workload import PayloadMaker
    for size in (40, 100, 1000):
        maker = PayloadMaker("baseline-20261124T010203Z-ab12", size)
        for vid in (0, 7, 12345, ledger.make_value_id(3, 99_999), ledger.make_value_id(15, 2**31)):
            assert maker.make(vid) == ledger.encode_payload("baseline-20261124T010203Z-ab12", vid, size)
            assert ledger.decode_value_id(maker.make(vid)) == vid
