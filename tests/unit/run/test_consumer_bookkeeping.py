"""The consumers' bookkeeping for the poll checks: the whole assignment after each rebalance event
(`consumer_events.assigned`) and each record's place in its poll (`reads.poll_seq`)."""
from __future__ import annotations

import pytest

from kafkaproof.run.java_driver import EVENTS_TSV, READS_TSV, read_tsv
from kafkaproof.run.workload import StreamWriter, assignment_after, incremental_rebalances, read_stream
from kafkaproof.spec import ledger

pytestmark = pytest.mark.unit


def test_an_eager_rebalance_revokes_everything_and_assigns_the_whole_new_set():
    a = assignment_after([], "assign", [2, 0], incremental=False)
    assert a == [0, 2]
    a = assignment_after(a, "revoke", [0, 2], incremental=False)
    assert a == []
    assert assignment_after(a, "assign", [1, 2], incremental=False) == [1, 2]
    # an assign names the whole set: whatever the bookkeeping held before is replaced
    assert assignment_after([0, 5], "assign", [1], incremental=False) == [1]


def test_an_incremental_rebalance_names_only_the_partitions_that_move():
    a = assignment_after([], "assign", [0, 1], incremental=True)
    a = assignment_after(a, "revoke", [1], incremental=True)
    assert a == [0]                                   # partition 0 was kept through the rebalance
    a = assignment_after(a, "assign", [1, 3], incremental=True)
    assert a == [0, 1, 3]
    assert assignment_after(a, "lost", [0, 1, 3], incremental=True) == []
    assert assignment_after([4], "revoke", [7], incremental=True) == [4]  # revoking what it did not hold


def test_only_rebalance_events_change_the_assignment():
    with pytest.raises(ValueError, match="assign, revoke or lost"):
        assignment_after([0], "commit", [0], incremental=True)


@pytest.mark.parametrize("conf,incremental", [
    ({}, False),
    ({"partition.assignment.strategy": "range,roundrobin"}, False),
    ({"partition.assignment.strategy": "cooperative-sticky"}, True),
    ({"group.protocol": "consumer"}, True),
    ({"group.protocol": "classic", "partition.assignment.strategy": "range"}, False),
])
def test_which_librdkafka_configs_rebalance_incrementally(conf, incremental):
    assert incremental_rebalances(conf) is incremental


def test_the_python_workers_streams_carry_the_assignment_and_the_poll_order(tmp_path):
    events = StreamWriter(tmp_path / "e.arrow", ledger.CONSUMER_EVENTS)
    events.append(0, 9, 0, 10, "start", [], None, None, None, None)
    events.append(0, 9, 0, 11, "revoke", [1], None, None, None, [0])
    events.close()
    reads = StreamWriter(tmp_path / "r.arrow", ledger.READS)
    reads.append(0, 9, 0, 1, 0, 5, None, 7, 12, 1, 0)
    reads.append(0, 9, 0, 1, 0, 3, None, 8, 12, 1, 1)
    reads.close()
    assert read_stream(tmp_path / "e.arrow", ledger.CONSUMER_EVENTS).column("assigned").to_pylist() == [None, [0]]
    got = read_stream(tmp_path / "r.arrow", ledger.READS)
    assert got.column("offset").to_pylist() == [5, 3] and got.column("poll_seq").to_pylist() == [0, 1]


def test_the_java_drivers_streams_carry_the_assignment_and_the_poll_order(tmp_path):
    (tmp_path / "e.tsv").write_text("0\t9\t0\t10\tstart\t\t\\N\t\\N\t\\N\t\\N\n"
                                    "0\t9\t0\t11\tassign\t1,3\t\\N\t\\N\t\\N\t0,1,3\n"
                                    "0\t9\t0\t12\trevoke\t0,1,3\t\\N\t\\N\t\\N\t\n")
    (tmp_path / "r.tsv").write_text("0\t9\t0\t1\t0\t5\t\\N\t7\t12\t1\t0\n0\t9\t0\t1\t0\t3\t\\N\t8\t12\t1\t1\n")
    events = read_tsv(tmp_path / "e.tsv", EVENTS_TSV)
    assert events.column("assigned").to_pylist() == [None, [0, 1, 3], []]
    assert read_tsv(tmp_path / "r.tsv", READS_TSV).column("poll_seq").to_pylist() == [0, 1]
