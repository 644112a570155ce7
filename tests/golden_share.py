"""Golden share-group histories (issue 46, KIP-932): deliveries and acknowledgements with exactly known anomalies.

Registered in tests/golden.py's GOLDENS (and so analysed by the one spark-submit of tests/spark/test_goldens.py).
Every history: one producer's acked values in the log, a share group with delivery limit 3 and a 1 s lock.
"""
from __future__ import annotations

from typing import Any, Callable

from golden import Golden, ns
from kafkaproof.spec.share_ledger import SHARE_TABLES

SHARE = {"consumers": 2, "delivery_limit": 3, "lock_timeout_ms": 1000}
SHARE_KINDS = ("share_accepted_twice", "share_undelivered", "share_not_returned", "share_rejected_returned",
               "share_concurrent_acquisition", "share_delivery_count", "share_past_limit")


def deliver(g: Golden, consumer: int, partition: int, offset: int, count: int, t_ms: float, ack: str | None = None,
            *, ack_ms: float = 10.0, success: bool = True,
            error: str = "InvalidRecordStateException: the record's lock timed out") -> None:
    """One delivery of `offset` to `consumer` with the broker's `count`, at `t_ms`; acknowledged `ack_ms` later
    as `ack` (None: never acknowledged, its lock times out), failed with `error` unless `success`."""
    for t in SHARE_TABLES:
        g.rows.setdefault(t, [])
    vid = next(r["value_id"] for r in g.rows["audit"] if r["partition"] == partition and r["offset"] == offset)
    did = len(g.rows["share_deliveries"])
    pid = 3000 + consumer
    g.rows["share_deliveries"].append({
        "delivery_id": did, "consumer": consumer, "consumer_pid": pid, "partition": partition, "offset": offset,
        "value_id": vid, "delivery_count": count, "acquired_ns": ns(t_ms)})
    if ack is not None:
        g.rows["share_acks"].append({
            "delivery_id": did, "consumer": consumer, "consumer_pid": pid, "partition": partition, "offset": offset,
            "type": ack, "ack_ns": ns(t_ms + ack_ms), "success": success,
            "error": None if success else error})


def _members(g: Golden, n: int, end_ms: float) -> None:
    for c in range(n):
        for event, t in (("start", 0.0), ("stop", end_ms)):
            g.rows["share_members"].append({"consumer": c, "consumer_pid": 3000 + c, "group": "share-g",
                                            "member_id": f"m{c}", "event": event, "ts_ns": ns(t)})


def _log(g: Golden, n: int) -> list[int]:
    """`n` acked values of producer 0 at offsets 0.. of partition 0; their value ids."""
    return [g.acked(0, seq, 10 * seq) for seq in range(n)]


def share_clean() -> Golden:
    """Two share consumers; offsets 0-3 accepted at once; 4 released by 0 and accepted by 1 (count 2); 5 rejected;
    6 a poison record released twice and timed out at count 3 (given up); 7 unacknowledged, its lock timed out,
    then accepted by the other consumer (count 2) after the lock ended; 8 acknowledged too late (failed), then
    accepted at count 2. Outcomes: 7 accepted, 1 rejected, 1 given up; passes."""
    g = Golden("share_clean", claims={"share_group": {}}, share=dict(SHARE))
    _log(g, 9)
    for o in range(4):
        deliver(g, o % 2, 0, o, 1, 1000 + 10 * o, "accept")
    deliver(g, 0, 0, 4, 1, 1100, "release")
    deliver(g, 1, 0, 4, 2, 1200, "accept")
    deliver(g, 1, 0, 5, 1, 1100, "reject")
    deliver(g, 0, 0, 6, 1, 1300, "release")
    deliver(g, 1, 0, 6, 2, 1400, "release")
    deliver(g, 0, 0, 6, 3, 1500)
    deliver(g, 0, 0, 7, 1, 1600)
    deliver(g, 1, 0, 7, 2, 2700, "accept")
    deliver(g, 0, 0, 8, 1, 1700, "accept", ack_ms=1200, success=False)
    deliver(g, 1, 0, 8, 2, 2800, "accept")
    _members(g, 2, 4000)
    return g


def share_every_kind() -> Golden:
    """One record per share-group anomaly (offset = position in SHARE_KINDS): 0 accepted by 0, then delivered to
    and accepted by 1; 1 never delivered; 2 released, never back; 3 rejected, then delivered and accepted; 4
    acquired by 1 while 0's lock (no acknowledgement) still held it; 5 redelivered at count 3 after count 1; 6
    released at counts 1-3, then delivered at count 4 and accepted; fails under the claim."""
    g = Golden("share_every_kind", claims={"share_group": {}}, share=dict(SHARE), status="fail")
    ids = _log(g, 7)
    deliver(g, 0, 0, 0, 1, 1000, "accept")
    deliver(g, 1, 0, 0, 2, 2000, "accept")
    deliver(g, 0, 0, 2, 1, 1000, "release")
    deliver(g, 0, 0, 3, 1, 1000, "reject")
    deliver(g, 1, 0, 3, 2, 1100, "accept")
    deliver(g, 0, 0, 4, 1, 1000)
    deliver(g, 1, 0, 4, 2, 1500, "accept")
    deliver(g, 0, 0, 5, 1, 1000, "release")
    deliver(g, 1, 0, 5, 3, 1100, "accept")
    for count in (1, 2, 3):
        deliver(g, count % 2, 0, 6, count, 1000 + 100 * count, "release")
    deliver(g, 0, 0, 6, 4, 1500, "accept")
    _members(g, 2, 3000)
    g.value_ids = {kind: [ids[i]] for i, kind in enumerate(SHARE_KINDS)}
    g.counts = {k: 1 for k in SHARE_KINDS}
    return g


def share_every_kind_detected() -> Golden:
    """The every-kind history as a negative control expecting each share kind: passes."""
    g = share_every_kind()
    g.name, g.status, g.analysis_from = "share_every_kind_detected", "pass", "share_every_kind"
    g.expect = {"outcome": "detect", "detect": sorted(g.counts)}
    return g


def share_not_applicable() -> Golden:
    """The clean history of tests/golden.py (no share ledger) claiming share_group: the claim cannot be judged,
    its kinds are not applicable and the run is never a pass: error."""
    import golden

    g = golden.clean()
    g.name, g.status, g.analysis_from, g.claims = "share_not_applicable", "error", "clean", {"share_group": {}}
    return g


LOST_ANSWER = "UnknownServerException: the server experienced an unexpected error when processing the request"


def share_unconfirmed() -> Golden:
    """Lost acknowledgement answers (issue 46): offsets 0-2 accepted; 3's accept and 4's reject failed (their answers
    lost) and neither came back: outcome unconfirmed, no share_not_returned; 5's accept failed too but it came back
    at count 2 and was accepted (accepted); 6 released, and its release failed: the lock ran out and it came back
    (accepted). Outcomes: 5 accepted, 2 unconfirmed; passes."""
    g = Golden("share_unconfirmed", claims={"share_group": {}}, share=dict(SHARE))
    _log(g, 7)
    for o in range(3):
        deliver(g, o % 2, 0, o, 1, 1000 + 10 * o, "accept")
    deliver(g, 0, 0, 3, 1, 1100, "accept", success=False, error=LOST_ANSWER)
    deliver(g, 1, 0, 4, 1, 1100, "reject", success=False, error=LOST_ANSWER)
    deliver(g, 0, 0, 5, 1, 1200, "accept", success=False, error=LOST_ANSWER)
    deliver(g, 1, 0, 5, 2, 2300, "accept")
    deliver(g, 0, 0, 6, 1, 1300, "release", success=False, error=LOST_ANSWER)
    deliver(g, 1, 0, 6, 2, 2400, "accept")
    _members(g, 2, 4000)
    return g


def share_failover() -> Golden:
    """A share-partition leader change (issue 46): partition 0's leader 1 is replaced by 2 between the snapshots at
    1.5 s and 2.0 s; partition 1 keeps leader 2. KIP-932 keeps Acquired state in the leader's memory only, so the new
    leader voids the locks and repeats counts. p0 offset 0: held by consumer 0 (no ack) from 1.2 s, redelivered to 1
    at 1.8 s at count 1 again: exempt. p0 offset 1: from 1.3 s, redelivered at 1.9 s at count 3 after 1: a jump
    across the change is still share_delivery_count (the lock, exempt). p0 offset 2: released at counts 1 and 2,
    held at 3 (the limit) from 1.4 s, redelivered at 1.95 s at 3 again and accepted: exempt from share_past_limit.
    p1 offset 0: held from 1.2 s, redelivered at 1.8 s with no change of p1's leader:
    share_concurrent_acquisition. Fails with those two; three failover redeliveries."""
    g = Golden("share_failover", claims={"share_group": {}}, share=dict(SHARE), status="fail")
    p0 = _log(g, 3)
    p1 = [g.acked(0, 100, 30, partition=1)]
    for t in range(0, 4001, 500):
        g.snapshot(t, 0, 1 if t <= 1500 else 2, [1, 2, 3] if t <= 1500 else [2, 3])
        g.snapshot(t, 1, 2, [1, 2, 3] if t <= 1500 else [2, 3])
    deliver(g, 0, 0, 0, 1, 1200)
    deliver(g, 1, 0, 0, 1, 1800, "accept")
    deliver(g, 0, 0, 1, 1, 1300)
    deliver(g, 1, 0, 1, 3, 1900, "accept")
    deliver(g, 0, 0, 2, 1, 1000, "release")
    deliver(g, 1, 0, 2, 2, 1100, "release")
    deliver(g, 0, 0, 2, 3, 1400)
    deliver(g, 1, 0, 2, 3, 1950, "accept")
    deliver(g, 0, 1, 0, 1, 1200)
    deliver(g, 1, 1, 0, 2, 1800, "accept")
    _members(g, 2, 4000)
    g.counts = {"share_delivery_count": 1, "share_concurrent_acquisition": 1}
    g.value_ids = {"share_delivery_count": [p0[1]], "share_concurrent_acquisition": p1}
    return g


SHARE_GOLDENS: dict[str, Callable[[], Golden]] = {f.__name__: f for f in (
    share_clean, share_every_kind, share_every_kind_detected, share_not_applicable, share_unconfirmed,
    share_failover)}
SHARE_CLEAN_OUTCOMES: dict[str, Any] = {"accepted": 7, "rejected": 1, "given_up": 1, "never_delivered": 0,
                                        "unconfirmed": 0, "not_returned": 0}
SHARE_UNCONFIRMED_OUTCOMES: dict[str, Any] = {**{k: 0 for k in SHARE_CLEAN_OUTCOMES}, "accepted": 5,
                                              "unconfirmed": 2}
