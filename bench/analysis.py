"""Benchmark of the analysis job on synthetic ledgers with known anomalies.

    PYTHONPATH=plugins .venv/bin/python bench/analysis.py [--values 1000000 10000000] [--rounds N] [--workdir DIR]

For each size it generates a ledger (vectorised numpy/pyarrow: 8 partitions, 4
producers, one consumer per partition), injects a known number of anomalies of
every kind in separate partitions so their counts do not interfere, runs
`spark-submit spark/analyze.py` on local[2] `--rounds` times on the same ledger, checks every
count exactly and prints per round the wall seconds of spark-submit, the job's own seconds
(and per phase), the CPU seconds of spark-submit and everything it started, and values/s; then
the median per size. Exit status 1 when a count is off.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins"))

from kafkaproof.analysis import analyze  # noqa: E402
from kafkaproof.spec.ledger import TABLES, write_arrow, write_manifest  # noqa: E402

P, PRODUCERS = 8, 4
T0 = 10**12
DURATION_NS = 60 * 10**9
MS = 10**6

# Injected anomalies: distinct numbers so a swapped count shows.
INJECT = {
    "lost": 101, "duplicates": 102, "redeliveries": 103, "aborted_reads": 104, "indefinite_landed": 105,
    "inconsistent_offsets": 106, "not_delivered": 107, "reordering": 108, "poll_skips": 109,
    "poll_rewinds": 110, "unknown_values": 111, "unseen": 112, "failed": 1000,
}
# Partition used by each injection (kept apart so counts are independent).
PART = {"duplicates": 0, "redeliveries": 1, "lost": 2, "aborted_reads": 3, "indefinite_landed": 3, "poll_skips": 3,
        "failed": 4, "unknown_values": 4, "unseen": 4, "inconsistent_offsets": 5, "not_delivered": 6,
        "poll_rewinds": 6, "reordering": 7}


def expected_counts() -> dict[str, int]:
    """Every kind's exact count, given the injections and how they co-occur."""
    k = INJECT
    return {
        "lost": k["lost"], "lost_unconfirmed": 0, "unseen": k["unseen"],
        "not_delivered": k["not_delivered"] + k["inconsistent_offsets"],  # a misread offset's own value is never read
        "duplicates": k["duplicates"], "redeliveries": k["redeliveries"] + 2 * k["poll_rewinds"],
        "observed_duplicates": k["inconsistent_offsets"],  # a misread value is seen at its own offset and another
        "aborted_reads": k["aborted_reads"], "indefinite_landed": k["indefinite_landed"],
        "inconsistent_offsets": k["inconsistent_offsets"], "ack_offset_mismatch": k["lost"],  # holes inside the log
        "reordering": k["reordering"], "poll_skips": k["poll_skips"], "poll_rewinds": k["poll_rewinds"],
        "unknown_values": k["unknown_values"],
    }


@dataclass
class Ledger:
    """Column arrays of the synthetic ledger."""

    sends: dict[str, np.ndarray]
    log: dict[str, np.ndarray]      # one row per record (written once per isolation)
    reads: dict[str, np.ndarray]
    events: dict[str, np.ndarray]
    high: np.ndarray


def _pick(rng: np.random.Generator, candidates: np.ndarray, k: int, spacing: int = 10) -> np.ndarray:
    """k well-separated entries of a sorted candidate array (middle of the range)."""
    n = len(candidates)
    idx = np.linspace(n * 0.1, n * 0.9, k).astype(np.int64)
    assert len(np.unique(idx)) == k and (np.diff(idx) >= spacing).all(), "partition too small for the injection"
    return candidates[idx]


def generate(n: int, seed: int = 7) -> Ledger:
    """A clean ledger of n values, then the injections of INJECT."""
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.int64)
    producer = (i % PRODUCERS).astype(np.int32)
    seq = i // PRODUCERS
    partition = ((i // PRODUCERS) % P).astype(np.int32)
    vid = (producer.astype(np.int64) << 32) + seq
    intended = T0 + i * (DURATION_NS // n)
    send = intended + rng.integers(0, 2 * MS, n)
    complete = send + (rng.exponential(3.0, n) * MS).astype(np.int64) + MS
    # Offsets: position within the partition in global send order.
    offset = np.empty(n, dtype=np.int64)
    for p in range(P):
        m = partition == p
        offset[m] = np.arange(m.sum())
    outcome = np.zeros(n, dtype=np.int8)  # 0 ok, 1 fail, 2 indefinite
    in_log = np.ones(n, dtype=bool)
    read = np.ones(n, dtype=bool)

    by_part = {p: np.flatnonzero(partition == p) for p in range(P)}
    # lost: acked, gone from the log (a hole inside it) and from the reads
    lost = _pick(rng, by_part[PART["lost"]], INJECT["lost"])
    in_log[lost] = False
    read[lost] = False
    # definite failures: not in the log either (their offsets are holes, unacked)
    failed = _pick(rng, by_part[PART["failed"]], INJECT["failed"], spacing=2)
    outcome[failed] = 1
    in_log[failed] = False
    read[failed] = False
    # aborted reads: the send says fail, yet the value is in the log and read
    p3 = by_part[3]
    aborted = _pick(rng, p3[: len(p3) // 3], INJECT["aborted_reads"])
    outcome[aborted] = 1
    indef = _pick(rng, p3[len(p3) // 3: 2 * len(p3) // 3], INJECT["indefinite_landed"])
    outcome[indef] = 2
    # reordering: swap the offsets of a value and the next value of its producer in the partition
    p7 = by_part[PART["reordering"]]
    a = _pick(rng, p7[: len(p7) - 2 * P], INJECT["reordering"], spacing=P)
    b = a + PRODUCERS * P  # same producer, next seq in the same partition
    assert (partition[b] == partition[a]).all() and (producer[b] == producer[a]).all()
    offset[a], offset[b] = offset[b].copy(), offset[a].copy()

    # Acked offsets of unacked values are unknown.
    ack_offset = np.where(outcome == 0, offset, -1)
    log_idx = np.flatnonzero(in_log)
    log = {"partition": partition[log_idx], "offset": offset[log_idx], "value_id": vid[log_idx]}

    # duplicates: a copy of a p0 value appended at the end of p0
    p0 = by_part[PART["duplicates"]]
    dup = _pick(rng, p0, INJECT["duplicates"])
    p0_end = offset[p0].max() + 1
    dup_off = p0_end + np.arange(len(dup))
    # unknown values: records of an unknown producer appended at the end of p4
    p4_end = offset[by_part[4]].max() + 1
    unk_vid = (np.int64(99) << 32) + np.arange(INJECT["unknown_values"], dtype=np.int64)
    unk_off = p4_end + np.arange(len(unk_vid))
    extra_log = {"partition": np.concatenate([np.zeros(len(dup), np.int32), np.full(len(unk_vid), 4, np.int32)]),
                 "offset": np.concatenate([dup_off, unk_off]),
                 "value_id": np.concatenate([vid[dup], unk_vid])}
    log = {k: np.concatenate([log[k], extra_log[k]]) for k in log}

    # unseen: acked beyond the final high watermark of p4 (never in the log)
    high = np.array([log["offset"][log["partition"] == p].max() + 1 for p in range(P)], dtype=np.int64)
    n_unseen = INJECT["unseen"]
    unseen_seq = seq.max() + 1 + np.arange(n_unseen)
    sends = {
        "value_id": np.concatenate([vid, (np.int64(0) << 32) + unseen_seq]),
        "producer": np.concatenate([producer, np.zeros(n_unseen, np.int32)]),
        "seq": np.concatenate([seq, unseen_seq]),
        "partition": np.concatenate([partition, np.full(n_unseen, 4, np.int32)]),
        "intended_ns": np.concatenate([intended, np.full(n_unseen, intended[-1])]),
        "send_ns": np.concatenate([send, np.full(n_unseen, send[-1])]),
        "complete_ns": np.concatenate([complete, np.full(n_unseen, complete[-1] + MS)]),
        "outcome": np.concatenate([outcome, np.zeros(n_unseen, np.int8)]),
        "offset": np.concatenate([ack_offset, high[4] + 10 + np.arange(n_unseen)]),
    }

    # Reads: the consumer of each partition reads its log in offset order.
    order = np.lexsort((log["offset"], log["partition"]))
    r_part, r_off, r_vid = log["partition"][order], log["offset"][order], log["value_id"][order]
    keep = np.ones(len(r_part), dtype=bool)
    # not_delivered: the consumer of p6 never reads its last records
    p6 = np.flatnonzero(r_part == PART["not_delivered"])
    keep[p6[-INJECT["not_delivered"]:]] = False
    # inconsistent offsets: the consumer of p5 reads a p6 value at some offsets
    p5 = np.flatnonzero(r_part == PART["inconsistent_offsets"])
    bad = _pick(rng, p5, INJECT["inconsistent_offsets"])
    r_vid = r_vid.copy()
    r_vid[bad] = r_vid[p6[: len(bad)]]
    # poll skips: the consumer of p3 does not read some records; single-read processes do
    p3r = np.flatnonzero(r_part == PART["poll_skips"])
    skipped = _pick(rng, p3r[2 * len(p3r) // 3:], INJECT["poll_skips"])
    keep[skipped] = False
    consumer = r_part.astype(np.int32)
    pid = 5000 + consumer
    incarnation = np.zeros(len(r_part), np.int32)
    main = {"consumer": consumer[keep], "consumer_pid": pid[keep], "incarnation": incarnation[keep],
            "partition": r_part[keep], "offset": r_off[keep], "value_id": r_vid[keep]}
    # poll rewinds: after reading offset o, the p6 consumer reads o-1 and o again
    rew_pos = np.flatnonzero(main["partition"] == PART["poll_rewinds"])
    rew = _pick(rng, rew_pos[1: len(rew_pos) // 2], INJECT["poll_rewinds"])
    ins_at = np.repeat(rew + 1, 2)
    src = np.stack([rew - 1, rew], axis=1).ravel()
    main = {k: np.insert(v, ins_at, v[src]) for k, v in main.items()}
    # extra processes: one per skipped record, and one re-reading a p1 range (redeliveries)
    p1_pos = np.flatnonzero(r_part == PART["redeliveries"])
    red = p1_pos[len(p1_pos) // 2: len(p1_pos) // 2 + INJECT["redeliveries"]]
    extra_src = np.concatenate([skipped, red])
    extra = {"consumer": consumer[extra_src], "partition": r_part[extra_src], "offset": r_off[extra_src],
             "value_id": r_vid[extra_src],
             "consumer_pid": np.concatenate([9000 + np.arange(len(skipped)), np.full(len(red), 8000)]).astype(np.int32),
             "incarnation": np.ones(len(extra_src), np.int32)}
    reads = {k: np.concatenate([main[k], extra[k]]) for k in main}
    m = len(reads["offset"])
    # Each process's reads are polls in sequence order.
    proc_break = np.r_[True, reads["consumer_pid"][1:] != reads["consumer_pid"][:-1]]
    start_of = np.maximum.accumulate(np.where(proc_break, np.arange(m), 0))
    reads["poll_id"] = (np.arange(m) - start_of).astype(np.int64)
    reads["read_ns"] = T0 + (reads["offset"] * (DURATION_NS // max(1, n // P))) + 50 * MS + reads["poll_id"]
    reads["generation"] = np.ones(m, np.int32)
    reads["poll_seq"] = np.zeros(m, np.int32)  # one record per poll
    procs = np.unique(np.stack([reads["consumer"], reads["consumer_pid"], reads["incarnation"]]), axis=1)
    events = {"consumer": procs[0].astype(np.int32), "consumer_pid": procs[1].astype(np.int32),
              "incarnation": procs[2].astype(np.int32), "ts_ns": np.full(procs.shape[1], T0 - MS)}
    return Ledger(sends, log, reads, events, high)


def _write(run_dir: Path, name: str, columns: dict) -> None:
    """Write a ledger table; columns the contract has and the bench does not set are null."""
    n = len(next(iter(columns.values())))
    full = {f.name: columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in TABLES[name]}
    write_arrow(run_dir, name, pa.table(full))


def write_ledger(ledger: Ledger, run_dir: Path) -> None:
    """Write the synthetic ledger as a run directory (contract schemas via ledger.write_arrow)."""
    s = ledger.sends
    n = len(s["value_id"])
    outcome_names = np.array(["ok", "fail", "indefinite"], dtype=object)
    outcome = pa.DictionaryArray.from_arrays(pa.array(s["outcome"]), pa.array(outcome_names.tolist())).cast(pa.string())
    ok = s["outcome"] == 0
    err = pa.DictionaryArray.from_arrays(pa.array(np.where(ok, 0, 1).astype(np.int8), mask=ok),
                                         pa.array(["", "_MSG_TIMED_OUT"])).cast(pa.string())
    _write(run_dir, "sends", {
        "value_id": s["value_id"], "producer": s["producer"], "producer_pid": (1000 + s["producer"]).astype(np.int32),
        "seq": s["seq"], "key": pa.nulls(n, pa.string()), "partition": s["partition"],
        "intended_ns": s["intended_ns"], "send_ns": s["send_ns"], "complete_ns": s["complete_ns"],
        "outcome": outcome, "offset": pa.array(s["offset"], mask=~ok),
        "error_code": pa.array(np.where(ok, 0, 7).astype(np.int32), mask=ok), "error_name": err,
    })
    lg = ledger.log
    m = len(lg["offset"])
    iso = pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.array([0, 1], np.int8), m)),
                                         pa.array(["read_committed", "read_uncommitted"])).cast(pa.string())
    _write(run_dir, "audit", {
        "isolation": iso, "partition": np.tile(lg["partition"], 2), "offset": np.tile(lg["offset"], 2),
        "key": pa.nulls(2 * m, pa.string()), "value_id": np.tile(lg["value_id"], 2),
        "timestamp_ms": np.zeros(2 * m, np.int64)})
    r = ledger.reads
    _write(run_dir, "reads", {c: r[c] for c in ("consumer", "consumer_pid", "incarnation", "generation",
                                                 "partition", "offset", "value_id", "read_ns", "poll_id",
                                                 "poll_seq")})
    e = ledger.events
    j = len(e["ts_ns"])
    _write(run_dir, "consumer_events", {
        **e, "event": pa.array(["assign"] * j),
        "partitions": pa.array([[int(p)] for p in e["consumer"]], pa.list_(pa.int32()))})
    _write(run_dir, "faults", {
        "fault_id": ["f1", "f2"], "kind": ["kill", "isolate"], "target": ["leader:0", "node:2"],
        "nodes": pa.array([[0], [2]], pa.list_(pa.int32())), "params": ["{}", "{}"],
        "start_ns": [T0 + 20 * 10**9, T0 + 40 * 10**9], "heal_ns": [T0 + 25 * 10**9, T0 + 45 * 10**9],
        "start_wall": ["", ""], "heal_wall": ["", ""]})
    _write(run_dir, "cluster_snapshots", {"ts_ns": pa.array([], pa.int64())})
    write_manifest(run_dir, {
        "run_id": run_dir.name, "status": "complete",
        "scenario": {"name": "bench", "guarantee": "at-least-once", "expect": {"outcome": "pass", "detect": []},
                     "producers": [{"acks": "all", "count": PRODUCERS}],
                     "consumers": [{"group": "bench", "isolation_level": "read_committed", "count": P}]},
        "clock": {"monotonic_origin_ns": T0, "wall_origin_ns": 0},
        "audit": {"partitions": {str(p): {"low": 0, "high": int(ledger.high[p]), "complete": True} for p in range(P)}},
    })


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prepare(n: int, workdir: Path) -> tuple[Path, float]:
    """Generate and write one size's ledger; (run directory, seconds it took)."""
    run_dir = workdir / f"bench-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    t = time.monotonic()
    write_ledger(generate(n), run_dir)
    return run_dir, time.monotonic() - t


def bench(n: int, run_dir: Path, master: str, conf: dict[str, str] | None = None) -> tuple[bool, dict[str, Any]]:
    """Analyse and check one size's ledger once; returns (exact, figures)."""
    cpu = children_cpu_s()
    t = time.monotonic()
    metrics = analyze(run_dir, master=master, quiet=True, extra_conf=conf)
    job_s = time.monotonic() - t
    cpu_s = children_cpu_s() - cpu
    want = expected_counts()
    got = metrics["counts"]
    wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    for k, (g, w) in wrong.items():
        print(f"  MISMATCH {k}: found {g}, injected/expected {w}")
    figures = {"values": n, "spark_submit_s": round(job_s, 1), "job_s": metrics.get("job_seconds"),
               "cpu_s": round(cpu_s, 1), "values_per_s": round(n / job_s), "phases": metrics.get("job_phases") or {}}
    return not wrong, figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--rounds", type=int, default=1, help="analyses of each size's ledger (default 1)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the generated run directories")
    parser.add_argument("--reuse", action="store_true", help="analyse the kept ledger of an earlier --keep run")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting, repeatable")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafkaproof-bench-"))
    conf = dict(c.split("=", 1) for c in args.conf)
    ok_all = True
    print(f"{'values':>12} {'round':>5} {'spark-submit s':>15} {'job s':>8} {'CPU s':>7} {'values/s':>10}  exact  "
          f"phases (s)")
    for n in args.values:
        if args.reuse and (workdir / f"bench-{n}" / "manifest.json").exists():
            run_dir = workdir / f"bench-{n}"
        else:
            run_dir, gen_s = prepare(n, workdir)
            print(f"{n:>12,} ledger generated in {gen_s:.1f} s", flush=True)
        rounds = []
        for i in range(1, args.rounds + 1):
            ok, f = bench(n, run_dir, args.master, conf)
            ok_all &= ok
            rounds.append(f)
            phases = " ".join(f"{k}={v:.1f}" for k, v in f["phases"].items())
            print(f"{n:>12,} {i:>5} {f['spark_submit_s']:>15} {f['job_s']:>8} {f['cpu_s']:>7} "
                  f"{f['values_per_s']:>10,}  {'yes' if ok else 'NO':<5}  {phases}", flush=True)
        if len(rounds) > 1:
            med = {k: statistics.median(r[k] for r in rounds) for k in ("spark_submit_s", "job_s", "cpu_s")}
            print(f"{n:>12,} {'med':>5} {med['spark_submit_s']:>15} {med['job_s']:>8} {med['cpu_s']:>7} "
                  f"{round(n / med['spark_submit_s']):>10,}", flush=True)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
