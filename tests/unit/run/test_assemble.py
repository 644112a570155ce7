"""Ledger assembly and crash-safe streams, without a cluster."""
from __future__ import annotations

import json

import pytest

from kafkaproof.spec import ledger
from kafkaproof.run.assemble import assemble_sends, fault_rows
from kafkaproof.run.workload import (COMPLETION_STREAM, SEND_STREAM, TXN_STREAM, CompletionLog, PayloadMaker, SendLog,
                                     StreamWriter, read_stream)

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


@pytest.mark.parametrize("keyed,transactional", [(False, False), (True, True)])
def test_the_producers_columnar_logs_write_the_rows_the_tuple_writer_would(tmp_path, keyed, transactional):
    sends = SendLog(tmp_path / "s.arrow", 2, 4242, keyed, transactional)
    for seq in range(5):
        sends.intended.append(100 + seq)
        sends.sent.append(200 + seq)
        if keyed:
            sends.keys.append(f"k{seq}")
        if transactional:
            sends.txn_ids.append(seq // 2)
        if seq == 2:
            sends.flush()  # batches continue the seqs
    sends.close()
    rows = read_stream(tmp_path / "s.arrow", SEND_STREAM).to_pylist()
    assert rows == [{"value_id": ledger.make_value_id(2, s), "producer": 2, "producer_pid": 4242, "seq": s,
                     "key": f"k{s}" if keyed else None, "intended_ns": 100 + s, "send_ns": 200 + s,
                     "txn_id": s // 2 if transactional else None} for s in range(5)]

    done = CompletionLog(tmp_path / "c.arrow", offsets_from_broker=not keyed)
    append = done.value_ids.append  # the hot path holds bound appends across flushes
    for i in range(3):
        append(ledger.make_value_id(2, i))
        done.completed.append(300 + i)
        done.partitions.append(i % 2)
        done.offsets.append(None if i == 1 else 10 + i)  # an ack librdkafka gave no offset
        done.flush()
    done.errors.append((ledger.make_value_id(2, 3), 400, -1, None, 7, "_MSG_TIMED_OUT", "timed out"))
    assert done.acked == 0
    done.close()
    rows = read_stream(tmp_path / "c.arrow", COMPLETION_STREAM).to_pylist()
    assert rows[:3] == [{"value_id": ledger.make_value_id(2, i), "complete_ns": 300 + i, "partition": i % 2,
                         "offset": None if keyed or i == 1 else 10 + i, "error_code": None, "error_name": None,
                         "error_message": None} for i in range(3)]
    assert rows[3]["error_name"] == "_MSG_TIMED_OUT" and rows[3]["partition"] == -1


@pytest.mark.parametrize("value_id", [0, 9, 10, 4_294_967_296, 12_345_678_901_234])
def test_payloads_are_the_ledgers_encoding(value_id):
    assert PayloadMaker("r-1", 100).make(value_id) == ledger.encode_payload("r-1", value_id, 100)
    assert ledger.decode_value_id(PayloadMaker("r-1", 20).make(value_id)) == value_id


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
