"""Golden exactly-once pipeline histories of the transaction faults (issue 43): a delayed Produce that landed in
a later transaction, and hanging transactions (a last stable offset that stalls mid-run and recovers; a
transaction still open at the end).

Registered in tests/golden.py's GOLDENS (and so analysed by the one spark-submit of tests/spark/test_goldens.py).
"""
from __future__ import annotations

from typing import Callable

from golden import Golden, _pipeline_inputs


def pipeline_delayed_produce() -> Golden:
    """Jepsen's delayed Produce, landed (what transactions v1 without an epoch bump allows): copier 0's
    transaction 0 wrote inputs a and b; the Produce of a's output was held past the copier's timeout, so the
    copier aborted (b's output has the abort marker) and copied a and b again in transaction 1. The held write
    reached the broker while transaction 1 was open and landed in it: a's output of transaction 0 sits before
    transaction 1's commit marker and is committed with it. A read_committed reader reads it. Must fail:
    eos_late_write (the aborted transaction's output committed) and eos_duplicated (a twice)."""
    g = Golden("pipeline_delayed_produce", claims={"exactly_once_pipeline": {}}, status="fail")
    (a, b, c), = _pipeline_inputs(g, 1, 3).values()
    g.copy(0, 0, "aborted", 1000, [a, b], drop=(a,))
    retry = g.copy(1, 0, "committed", 3000, [a, b], commit=2)
    late = g._next_output[0] - 1  # where transaction 1's marker was: the late write lands before it
    g._next_output[0] += 1
    g.rows["output_audit"].append({"partition": 0, "offset": late, "value_id": a, "txn": 0, "committed": True})
    last = g.copy(2, 0, "committed", 4000, [c], commit=3)
    g.committed_offset(0, 3)
    for vid, offset in [*retry.items(), (a, late), *last.items()]:
        g.output_read(0, 0, offset, vid, 5000)
    g.value_ids = {"eos_late_write": [a], "eos_duplicated": [a]}
    g.counts = {k: len(v) for k, v in g.value_ids.items()}
    return g


def pipeline_hanging() -> Golden:
    """Hanging transactions. Output partition 0: copier 0 committed transaction 0, then was killed inside
    transaction 1 (its output c at offset 3, never ended by the copier); copier 1 took input partition 0 over
    and committed transaction 2 (c and d, commit requested at 2,050 ms), but transaction 1 held the partition's
    last stable offset until the coordinator aborted it ~38 s later: the read_committed reader read transaction
    2's outputs only at 40,050 ms (past the 10 s transaction timeout plus the 10 s check interval): an
    lso_stall that recovered, blamed on transaction 1 (its producer id, epoch and copier named). Output
    partition 1: copier 1's transaction 3 is still open when the run ends, no marker: a hanging_transaction.
    Must fail with both."""
    g = Golden("pipeline_hanging", claims={"exactly_once_pipeline": {}}, status="fail")
    ins = _pipeline_inputs(g, 2, 4)
    a, b, c, d = ins[0]
    first = g.copy(0, 0, "committed", 1000, [a, b], commit=2)
    stuck = g.copy(1, 0, "indefinite", 1200, [c], ended=False)
    g.rows["output_audit"][-1]["committed"] = False  # the coordinator's abort marker, written later
    g._next_output[0] += 1  # ... which follows transaction 2's records in the log; its offset is not in the audit
    taken = g.copy(2, 1, "committed", 2000, [c, d], commit=4)
    g.committed_offset(0, 4)
    open_ = g.copy(3, 1, "indefinite", 3000, [ins[1][0]], ended=False)
    g.committed_offset(1, 0)
    for vid, offset in first.items():
        g.output_read(0, 0, offset, vid, 1100)
    for vid, offset in taken.items():
        g.output_read(0, 0, offset, vid, 40_050)
    (vc, _), = stuck.items()
    (vg, _), = open_.items()
    g.value_ids = {"lso_stall": [vc], "hanging_transaction": [vg]}
    g.counts = {k: len(v) for k, v in g.value_ids.items()}
    return g


PIPELINE_GOLDENS: dict[str, Callable[[], Golden]] = {f.__name__: f for f in (
    pipeline_delayed_produce, pipeline_hanging)}
