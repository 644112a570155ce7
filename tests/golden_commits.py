"""Golden histories of the commit-consistency checks (issue 45): one per kind that must make a run fail, and
clean ones (a rebalance, a restart resuming exactly at the commit, a commit past an aborted record) that pass.

tests/spark/test_goldens.py analyses them with the other goldens (golden.py), in the same session.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from golden import Golden, ns


@dataclass
class CommitGolden(Golden):
    """A golden whose scenario may accept kinds with a reason (`allow: {kind: reason}`)."""

    allow: dict[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        doc = super().manifest()
        if self.allow:
            doc["scenario"]["allow"] = dict(self.allow)
        return doc


def commit(g: Golden, consumer: int, t_ms: float, offsets: dict[int, int], *, pid: int | None = None,
           incarnation: int = 0, success: bool = True) -> None:
    """A commit event: `offsets` maps partition -> committed offset (the next one to read)."""
    g.rows["consumer_events"].append({
        "consumer": consumer, "consumer_pid": 2000 + consumer if pid is None else pid, "incarnation": incarnation,
        "ts_ns": ns(t_ms), "event": "commit", "partitions": list(offsets), "offsets": list(offsets.values()),
        "success": success, "error": None if success else "REBALANCE_IN_PROGRESS", "assigned": None})


def produce(g: Golden, n: int, partition: int = 0, first_seq: int = 0) -> list[int]:
    """`n` acked values in the log of `partition` (offsets from the partition's next one); their value ids."""
    return [g.acked(0, first_seq + i, first_seq + i, partition=partition) for i in range(n)]


def read_range(g: Golden, consumer: int, partition: int, vids: list[int], first: int, last: int, t_ms: float,
               **kw: Any) -> None:
    """The consumer reads offsets first..last of `partition` (value ids `vids` by offset) in one poll."""
    for i, o in enumerate(range(first, last + 1)):
        g.read(consumer, partition, o, vids[o], t_ms + i, new_poll=i == 0, **kw)


# --------------------------------------------------------------------------- clean: must pass

def commits_clean_rebalance() -> Golden:
    """Two consumers of one group; an eager rebalance moves p1 from consumer 0 to consumer 1, which starts it
    exactly at the group's last commit; both keep committing what they read."""
    g = CommitGolden("commits_clean_rebalance", guarantee="exactly-once",
                     consumers=[{"group": "g"}, {"group": "g"}])
    p0, p1 = produce(g, 10, 0), produce(g, 10, 1, first_seq=10)
    g.event(0, "assign", 100, [0, 1], assigned=[0, 1])
    read_range(g, 0, 0, p0, 0, 4, 110)
    read_range(g, 0, 1, p1, 0, 4, 120)
    commit(g, 0, 130, {0: 5, 1: 5})
    g.event(0, "revoke", 200, [0, 1], assigned=[])
    g.event(0, "assign", 210, [0], assigned=[0])
    g.event(1, "assign", 210, [1], assigned=[1])
    read_range(g, 0, 0, p0, 5, 9, 220)
    commit(g, 0, 230, {0: 10})
    read_range(g, 1, 1, p1, 5, 9, 225)
    commit(g, 1, 240, {1: 10})
    return g


def commits_clean_restart() -> Golden:
    """A read_committed consumer reads 0..4, skips an aborted record (offset 5) and commits 6, past it; it
    crashes, and its next incarnation resumes exactly at 6."""
    g = CommitGolden("commits_clean_restart", guarantee="exactly-once", consumers=[{"group": "g"}])
    vids = produce(g, 5)
    aborted = g.send(0, 5, 50, offset=5, txn_id=1, txn_outcome="abort")
    g.log(0, 5, aborted, committed=False)
    vids += [aborted] + [g.acked(0, s, s * 10) for s in range(6, 10)]
    g.event(0, "assign", 100, [0], pid=3000, assigned=[0])
    read_range(g, 0, 0, vids, 0, 4, 110, pid=3000)
    commit(g, 0, 120, {0: 6}, pid=3000)
    commit(g, 0, 125, {0: 2}, pid=3000, success=False)  # a failed commit is no commit
    g.event(0, "crash", 130, pid=3000)
    g.event(0, "assign", 200, [0], pid=3001, incarnation=1, assigned=[0])
    read_range(g, 0, 0, vids, 6, 9, 210, pid=3001, incarnation=1)
    commit(g, 0, 220, {0: 10}, pid=3001, incarnation=1)
    return g


# --------------------------------------------------------------------------- one kind each: must fail

def restart(g: Golden, read_to: int, committed: int, resume_at: int) -> list[int]:
    """Ten values in p0; process 3000 reads 0..`read_to`, commits `committed` and is replaced by process 3001
    (incarnation 1), which reads from `resume_at` to the end. Returns the value ids by offset."""
    vids = produce(g, 10)
    g.event(0, "assign", 100, [0], pid=3000, assigned=[0])
    read_range(g, 0, 0, vids, 0, read_to, 110, pid=3000)
    commit(g, 0, 130, {0: committed}, pid=3000)
    g.event(0, "assign", 200, [0], pid=3001, incarnation=1, assigned=[0])
    read_range(g, 0, 0, vids, resume_at, 9, 210, pid=3001, incarnation=1)
    return vids


def commit_rewind() -> Golden:
    """KAFKA-19902-style reset: the group committed 10, and the restarted consumer starts at 0 again."""
    g = CommitGolden("commit_rewind", consumers=[{"group": "g"}], status="fail",
                     counts={"rewind_below_commit": 1, "redeliveries": 10})
    vids = restart(g, read_to=9, committed=10, resume_at=0)
    g.value_ids = {"rewind_below_commit": [vids[0]], "redeliveries": vids}
    return g


def commit_rewind_allowed() -> Golden:
    """The rewind accepted by the scenario with a reason: allowable_with_reason, a pass."""
    g = commit_rewind()
    g.name, g.status, g.analysis_from = "commit_rewind_allowed", "pass", "commit_rewind"
    g.allow = {"rewind_below_commit": "auto.offset.reset=earliest after the offsets topic was wiped"}
    return g


def commit_skip() -> Golden:
    """The group committed 5; the restarted consumer starts at 8: 5..7 are never read by the group."""
    g = CommitGolden("commit_skip", guarantee="at-most-once", consumers=[{"group": "g"}], status="fail",
                     counts={"skip_above_commit": 1, "not_delivered": 3})
    vids = restart(g, read_to=4, committed=5, resume_at=8)
    g.value_ids = {"skip_above_commit": [vids[8]], "not_delivered": vids[5:8]}
    return g


def commit_beyond_read() -> Golden:
    """The consumer read 0..4 and committed 8; its successor resumes at 8: 5..7 never read."""
    g = CommitGolden("commit_beyond_read", consumers=[{"group": "g"}], status="fail",
                     counts={"commit_beyond_read": 1, "not_delivered": 3})
    vids = restart(g, read_to=4, committed=8, resume_at=8)
    g.value_ids = {"commit_beyond_read": [], "not_delivered": vids[5:8]}
    return g


def commit_regression() -> Golden:
    """The group committed 10, then 4 (no seek or reset asked for): the committed offset went backwards."""
    g = CommitGolden("commit_regression", consumers=[{"group": "g"}], status="fail",
                     counts={"commit_regression": 1})
    vids = produce(g, 10)
    g.event(0, "assign", 100, [0], assigned=[0])
    read_range(g, 0, 0, vids, 0, 9, 110)
    commit(g, 0, 130, {0: 10})
    commit(g, 0, 140, {0: 4})
    g.value_ids = {"commit_regression": []}
    return g


def double_ownership() -> Golden:
    """Consumer 1 of the group reads p0 (offsets 10..14) while consumer 0, which never lost p0, still reads it
    (0..4, then 5..9 after): no offset twice, but two owners at once."""
    g = CommitGolden("double_ownership", guarantee="exactly-once", consumers=[{"group": "g"}, {"group": "g"}],
                     status="fail", counts={"double_ownership": 1})
    vids = produce(g, 15)
    g.event(0, "assign", 100, [0], assigned=[0])
    g.event(1, "assign", 100, [0], assigned=[0])
    read_range(g, 0, 0, vids, 0, 4, 110)
    read_range(g, 1, 0, vids, 10, 14, 200)
    read_range(g, 0, 0, vids, 5, 9, 300)
    g.value_ids = {"double_ownership": [vids[10]]}
    return g


GOLDENS: dict[str, Callable[[], Golden]] = {f.__name__: f for f in (
    commits_clean_rebalance, commits_clean_restart, commit_rewind, commit_rewind_allowed, commit_skip,
    commit_beyond_read, commit_regression, double_ownership,
)}
