"""An application run's ledger, mapped by `run/app_ledger.py` and `run/processed.py`, judged by the
unchanged Spark job: loss, failed-yet-written, indefinite, duplicates and undelivered events come
out exactly, and the position checks the application's data cannot judge stay silent (partition -1
and null offsets in sends, null positions in reads)."""
from __future__ import annotations

import pyarrow as pa
import pytest

import golden
from golden import MS, T0_NS, WALL0_NS
from kafkaproof import analysis
from kafkaproof.run.app_ledger import event_index, not_applicable, sends_from_http
from kafkaproof.run.http_driver import HTTP_SENDS
from kafkaproof.run.processed import read_row

pytestmark = pytest.mark.spark

OFFSET = WALL0_NS - T0_NS  # the driver's clock is wall-clock anchored


def request(seq: int, worker: int, outcome: str, status: int | None, failure: str | None) -> dict:
    t = T0_NS + OFFSET + seq * 100 * MS
    return {"seq": seq, "event_id": f"u-{seq}", "worker": worker, "intended_ns": t, "send_ns": t + MS,
            "complete_ns": t + 20 * MS, "outcome": outcome, "status": status, "failure": failure,
            "error_message": None if outcome == "accepted" else "x"}


def test_the_unchanged_job_judges_an_application_run(tmp_path):
    http = pa.Table.from_pylist([
        request(0, 0, "accepted", 200, None),     # in the log, processed
        request(1, 1, "accepted", 200, None),     # in the log, processed twice
        request(2, 0, "accepted", 202, None),     # lost: never in the log
        request(3, 1, "rejected", 503, None),     # said no, but in the log: aborted_reads
        request(4, 0, "indefinite", None, "timeout"),  # in the log, never processed
        request(5, 1, "accepted", 200, None),     # in the log twice
    ], schema=HTTP_SENDS)
    index = event_index(http, per_worker=True)
    vid = [index[f"u-{i}"] for i in range(6)]
    g = golden.Golden("app", claims={"delivery": {"within_s": 1}})
    g.rows["sends"] = sends_from_http(http, per_worker=True, clock_offset_ns=OFFSET).to_pylist()
    for partition, offset, value_id in [(0, 0, vid[0]), (1, 0, vid[1]), (0, 1, vid[3]), (1, 1, vid[4]),
                                        (0, 2, vid[5]), (1, 2, vid[5]), (0, 3, -1)]:
        g.log(partition, offset, value_id)
    t = T0_NS + 1000 * MS
    g.rows["reads"] = [read_row(v, t + i * MS, poll_id=i) for i, v in enumerate([vid[0], vid[1], vid[3], vid[5], vid[1]])]
    run_dir = g.write(tmp_path / "app")

    metrics = analysis.analyze_many([run_dir], extra_conf={"spark.sql.shuffle.partitions": "1"})[run_dir]
    counts = {k: n for k, n in metrics["counts"].items() if n}
    assert counts == {"lost": 1, "aborted_reads": 1, "indefinite_landed": 1, "duplicates": 1,
                      "undelivered_attempts": 2}, counts
    assert not set(counts) & set(not_applicable("http", causal_sends=True))
    assert metrics["latency_ms"]["publish"]["count"] == 4  # accepted answers only
    assert metrics["latency_ms"]["publish"]["max"] == pytest.approx(19.0)
