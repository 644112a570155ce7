"""The runner's side of a share-group workload (run/share_run.py): pure pieces."""
from __future__ import annotations

import json

import pytest

from kafkaproof.run.share_run import (group_configs, killed_members, missing_offsets, record_states, share_clients,
                                      share_spec)
from kafkaproof.spec.share_group import with_defaults

pytestmark = pytest.mark.unit

SECTION = with_defaults({"consumers": 2, "delivery_limit": 3, "lock_timeout_ms": 2000,
                         "config": {"max.poll.records": 50}}, "s")
MS = 1_000_000


def test_the_group_configs_and_the_worker_spec():
    assert group_configs(SECTION) == {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000",
                                      "share.delivery.count.limit": "3"}
    spec = share_spec(SECTION, "4.3.1", seed=7)
    assert (spec["role"], spec["client"], spec["client_version"], spec["group"]) == ("share", "java", "4.3.1",
                                                                                     "kp-share-s")
    assert spec["config"] == {"max.poll.records": 50} and spec["share"]["seed"] == 7
    assert spec["share"]["ack"]["mode"] == "explicit" and spec["share"]["lock_timeout_ms"] == 2000


def test_share_clients_leave_no_consumer_group_to_judge():
    clients = share_clients({"producers": [{"index": 0}], "consumers": [{"index": 0}, {"index": 1}]}, SECTION)
    assert clients["consumers"] == [] and clients["producers"] == [{"index": 0}]
    assert [c["index"] for c in clients["share_consumers"]] == [0, 1]


def _d(did, offset, count, t_ms, partition=0):
    return {"delivery_id": did, "partition": partition, "offset": offset, "delivery_count": count,
            "acquired_ns": t_ms * MS}


def _a(did, kind, ok=True):
    return {"delivery_id": did, "type": kind, "success": ok}


def test_record_states():
    deliveries = [_d(1, 0, 1, 0), _d(2, 1, 1, 0), _d(3, 2, 1, 0), _d(4, 3, 3, 0), _d(5, 4, 3, 0), _d(6, 5, 1, 0),
                  _d(7, 6, 1, 0), _d(8, 6, 2, 100)]
    acks = [_a(1, "accept"), _a(2, "reject"), _a(3, "accept", ok=False), _a(4, "release"), _a(7, "accept")]
    states = record_states(deliveries, acks, limit=3, lock_ms=2000, now_ns=1000 * MS)
    assert states == {(0, 0): "accepted", (0, 1): "rejected", (0, 2): "open", (0, 3): "given_up", (0, 4): "open",
                      (0, 5): "open", (0, 6): "accepted"}
    later = record_states(deliveries, acks, limit=3, lock_ms=2000, now_ns=3000 * MS)
    assert later[(0, 4)] == "given_up" and later[(0, 5)] == "open"  # below the limit: it must come back


def test_missing_offsets_per_partition():
    states = {(0, 0): "accepted", (0, 1): "open", (1, 0): "accepted"}
    assert missing_offsets(states, {0: 2, 1: 3, 2: 0}) == {1: 2}
    assert missing_offsets(states, {0: 2, 1: 1}) == {}


def test_killed_members_from_the_fault_log(tmp_path):
    log = tmp_path / "faults.jsonl"
    rows = [{"event": "inject", "kind": "kill", "target": "consumer:1", "params": {"pid": 42}, "mono_ns": 5},
            {"event": "heal", "kind": "kill", "target": "consumer:1"},
            {"event": "inject", "kind": "pause", "target": "consumer:0", "params": {"pid": 41}, "mono_ns": 6}]
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert killed_members(log) == [{"consumer": 1, "consumer_pid": 42, "group": None, "member_id": None,
                                    "event": "killed", "ts_ns": 5}]
    assert killed_members(tmp_path / "none.jsonl") == []
