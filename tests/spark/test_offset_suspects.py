"""The offset checks aggregated only where a position suspect sits give what aggregating every offset
gives (docs/analysis.md, "Offset checks"), on random histories full of what those checks find.

One in-process Spark session (local[1]); each history is compared both ways, row for row, and must
hold enough of each offset kind that the equality says something.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from golden import Golden
from kafkaproof.spec.ledger import make_value_id

from support import load_analysis_job

pytestmark = pytest.mark.spark

job = load_analysis_job()
KINDS = ("inconsistent_offsets", "ack_offset_mismatch", "redeliveries")
MIN_ROWS = 10  # of each kind, per history
# seed -> broadcast limit of the suspect joins (5: shuffled joins, as for a run with many suspects)
SEEDS = {0: 2_000_000, 1: 5, 2: 2_000_000, 3: 5, 4: 2_000_000, 5: 5}


def random_history(seed: int, partitions: int = 3, records: int = 160) -> Golden:
    """Acked values in the log, and around them: acks at the wrong offset or lost, overwritten and
    aborted records, duplicates, foreign records and values never sent; two consumer groups reading
    the committed log with misreads, redeliveries and reads of values never sent."""
    rnd = random.Random(seed)
    g = Golden(f"suspects-{seed}", consumers=[{"group": "a"}, {"group": "a"}, {"group": "b"}])
    seq = {p: 0 for p in range(3)}
    t = 0.0

    def next_value(producer: int) -> int:
        seq[producer] += 1
        return make_value_id(producer, seq[producer])

    for part in range(partitions):
        offset = 0
        for _ in range(records):
            t += 1
            producer = rnd.randrange(3)
            roll = rnd.random()
            if roll < 0.62:    # acked where it is
                g.acked(producer, seq[producer] + 1, t, partition=part, offset=offset)
                seq[producer] += 1
            elif roll < 0.68:  # acked one offset off
                vid = g.send(producer, seq[producer] + 1, t, partition=part, offset=offset + rnd.choice((-1, 1)))
                seq[producer] += 1
                g.log(part, offset, vid)
            elif roll < 0.72:  # acked, lost: another value's record where the ack says
                g.send(producer, seq[producer] + 1, t, partition=part, offset=offset)
                seq[producer] += 1
                g.acked(producer, seq[producer] + 1, t, partition=part, offset=offset)
                seq[producer] += 1
            elif roll < 0.76:  # acked, no record at that offset: the log skips it
                g.send(producer, seq[producer] + 1, t, partition=part, offset=offset)
                seq[producer] += 1
                offset += 1
                continue
            elif roll < 0.80:  # aborted record: in the full log only
                g.log(part, offset, next_value(producer), committed=False)
            elif roll < 0.84:  # a duplicate of an earlier committed value
                earlier = [r["value_id"] for r in g.rows["audit"] if r["isolation"] == "read_committed"]
                g.log(part, offset, rnd.choice(earlier) if earlier else next_value(producer))
            elif roll < 0.88:  # a foreign record
                g.log(part, offset, -1)
            elif roll < 0.92:  # a value never sent (ids past every producer's sequence)
                g.log(part, offset, make_value_id(7, 10_000 + offset + 1000 * part))
            else:              # a failed send, and the record that is there
                g.send(producer, seq[producer] + 1, t, partition=part, outcome="fail")
                seq[producer] += 1
                g.acked(producer, seq[producer] + 1, t, partition=part, offset=offset)
                seq[producer] += 1
            offset += 1
    committed = sorted((r["partition"], r["offset"], r["value_id"]) for r in g.rows["audit"]
                       if r["isolation"] == "read_committed")
    for consumer in (0, 2):  # one consumer of each group reads everything, with mistakes
        for part, offset, vid in committed:
            t += 0.5
            roll = rnd.random()
            if roll < 0.04:
                continue  # not read
            if roll < 0.08:
                g.read(consumer, part, offset, vid, t)
                g.read(consumer, part, offset, vid, t + 0.1)  # redelivered
            elif roll < 0.11:
                g.read(consumer, part, offset, rnd.choice(committed)[2], t)  # a misread
            elif roll < 0.13:
                g.read(consumer, part, offset, make_value_id(8, int(t * 10)), t)  # a value never sent
            else:
                g.read(consumer, part, offset, vid, t)
        g.read(1, 0, 0, committed[0][2], t + 1)  # the group's other consumer reads offset 0 again
    return g


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[1]").appName("kafkaproof-offset-suspects")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs at INFO from finalizers, after pytest closed the streams it would write to.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    yield session
    session.stop()


def offset_rows(spark, run_dir: Path, broadcast_limit: int | None) -> list[tuple]:
    """The offset checks' rows, sorted: over every offset (None), or only where suspects sit."""
    store = job.RunStore(spark)
    ctx = job.build_context(str(run_dir), job.read_manifest(store, str(run_dir)))
    sends, audit, reads = (job.load_table(spark, store, str(run_dir), t) for t in ("sends", "audit", "reads"))
    values = None
    if broadcast_limit is not None:
        values = job.classify_values(sends, job.value_observations(audit, reads, ctx), ctx).persist()
    try:
        rows = job.offset_anomalies(sends, audit, reads, ctx, values,
                                    broadcast_limit=broadcast_limit or 0).collect()
    finally:
        for df in ctx.cached + ([values] if values is not None else []):
            df.unpersist()
    return sorted(tuple(map(repr, r)) for r in rows)


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_offset_checks_on_suspects_equal_those_on_every_offset(spark, tmp_path, seed):
    run_dir = random_history(seed).write(tmp_path / f"run-{seed}")
    every = offset_rows(spark, run_dir, None)
    kinds = [r[0].strip("'") for r in every]
    assert all(kinds.count(k) >= MIN_ROWS for k in KINDS), {k: kinds.count(k) for k in KINDS}
    assert offset_rows(spark, run_dir, SEEDS[seed]) == every
