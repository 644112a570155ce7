"""The share run's settle (issue 46): a record whose accept failed (a lost ShareAcknowledge answer) and that did not
come back once its lock ran out is `unconfirmed`, not waited for until the drain timeout."""
from __future__ import annotations

import pytest

from kafkaproof.run.share_run import UNCONFIRMED_GRACE_MS, record_states

pytestmark = pytest.mark.unit

MS = 1_000_000


def _delivery(did: int, offset: int, count: int, t_ms: int) -> dict:
    return {"delivery_id": did, "partition": 0, "offset": offset, "delivery_count": count, "acquired_ns": t_ms * MS}


def _ack(did: int, kind: str, success: bool) -> dict:
    return {"delivery_id": did, "type": kind, "success": success}


def test_a_failed_accept_that_does_not_come_back_is_unconfirmed_after_its_lock_and_grace() -> None:
    deliveries = [_delivery(0, 0, 1, 0), _delivery(1, 1, 1, 0), _delivery(2, 2, 1, 0), _delivery(3, 2, 2, 1500),
                  _delivery(4, 3, 1, 0)]
    acks = [_ack(0, "accept", False), _ack(1, "reject", False), _ack(2, "accept", False), _ack(3, "accept", True),
            _ack(4, "release", False)]
    lock = 1000
    before = record_states(deliveries, acks, 5, lock, (lock + UNCONFIRMED_GRACE_MS - 1) * MS)
    assert before == {(0, 0): "open", (0, 1): "open", (0, 2): "accepted", (0, 3): "open"}
    after = record_states(deliveries, acks, 5, lock, (lock + UNCONFIRMED_GRACE_MS) * MS)
    # a failed release is no acknowledgement the broker may have taken: the record must come back
    assert after == {(0, 0): "unconfirmed", (0, 1): "unconfirmed", (0, 2): "accepted", (0, 3): "open"}
