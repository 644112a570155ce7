"""The pure parts of the Spark analysis job (spark/analyze.py) and its spark-submit wrapper, without a JVM."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import golden
from support import REPO, load_analysis_job

from kafkaproof import analysis
from kafkaproof.errors import AnalysisError, LedgerError

job = load_analysis_job()


@pytest.mark.unit
def test_unacknowledged_writes_from_proxy_events():
    def row(phase, base, counts, topic="t", ts=1, fault="f", action="lost_ack", detail=None):
        return {"ts_ns": ts, "fault_id": fault, "rule_id": fault, "broker": 2, "conn": 1, "correlation_id": 9,
                "action": action, "phase": phase, "topic": topic, "partitions": [0, 1],
                "base_offsets": base, "record_counts": counts, "detail": detail}
    writes = job.unacknowledged_writes([
        row("request_forwarded", None, [3, 1]),
        row("response_dropped", [10, -1], [3, 1]),              # partition 1 answered an error: nothing written
        row("response_replaced", [20, 5], None, ts=2),          # count unknown: the base offset alone
        row("response_dropped", [10, -1], [3, 1], ts=3),        # the same write reported again: kept once
        row("response_dropped", [99, 99], [1, 1], topic="u"),   # another topic
        row("response_discarded", [30, -1], [2, 1], ts=4),      # answered, lost in the reset behind a lost ack
        row("response_discarded", None, [4, 4], ts=5),          # no answer yet: nothing known to be written
        row("response_discarded", [40, -1], [1, 1], ts=6, fault="slow", action="latency"),  # held until given up
        row("response_discarded", [50, -1], [2, 1], ts=7,  # written to the client just before the reset
            detail=json.dumps({"caused_by": "response_dropped", "delivered": True, "response_received": True})),
    ], "t")
    assert [(w["partition"], w["first_offset"], w["last_offset"], w["phase"], w["delivered"]) for w in writes] == [
        (0, 10, 12, "response_dropped", False), (0, 20, 20, "response_replaced", False),
        (0, 30, 31, "response_discarded", False), (0, 40, 40, "response_discarded", False),
        (0, 50, 51, "response_discarded", True), (1, 5, 5, "response_replaced", False)]
    assert "whose response the fault proxy dropped (lost ack): fault f" in job.cause_text(writes[0])
    assert "whose response the fault proxy replaced with an error" in job.cause_text(writes[1])
    assert "whose response was discarded when the fault proxy reset the connection: fault f" in \
        job.cause_text(writes[2])
    assert "whose response the fault proxy held back until the client gave up on it (closed the connection): " \
           "fault slow" in job.cause_text(writes[3])
    assert "whose response the fault proxy wrote to the client just before it reset the connection, unread by " \
           "the client: fault f" in job.cause_text(writes[4])
    assert job.unacknowledged_writes([], "t") == []


@pytest.mark.unit
def test_manifest_parsing():
    scenario = {"producers": [{"acks": 0}, {"config": {"acks": "all"}, "count": 2}],
                "consumers": [{"group": "a", "isolation_level": "read_uncommitted"}, {"group": "b"}, {}]}
    ctx = job.build_context(Path("/x"), {"scenario": scenario, "audit": {"partitions": [
        {"partition": 1, "low": 0, "high": 5, "complete": False}, {"partition": 0, "high": 3, "complete": True}]}})
    assert ctx.producer_acks == {0: 0, 1: -1, 2: -1}
    assert ctx.groups == ["a", "b", "default"] and ctx.consumer_group == {0: 0, 1: 1, 2: 2}
    assert ctx.consumer_read_committed == {0: False, 1: True, 2: True}
    assert [(p.partition, p.high, p.complete) for p in ctx.partitions] == [(0, 3, True), (1, 5, False)]
    assert not ctx.all_complete
    assert job.parse_acks("1") == 1 and job.parse_acks(None) == -1
    with pytest.raises(job.AnalysisInputError):
        job.parse_acks("most")


@pytest.mark.unit
def test_time_helpers():
    rows = [{"second": s, "unavailable": u} for s, u in enumerate([False, True, True, False, True])]
    assert job.unavailability_windows(rows) == [{"start_s": 1, "end_s": 2, "seconds": 2}, {"start_s": 4, "end_s": 4, "seconds": 1}]
    lag = job.consumer_lag_series([(0, 0, 9), (1, 1, 4)], [(0, 0, 0, 4), (0, 1, 1, 4)], 0, 2)
    assert lag == {0: 5, 1: 5, 2: 5}


@pytest.mark.unit
def test_spark_submit_argv(monkeypatch, tmp_path):
    argv = analysis.spark_submit_argv(tmp_path, spark_submit="/bin/spark-submit", extra_conf={"spark.x": 1})
    assert argv[:3] == ["/bin/spark-submit", "--master", "local[2]"]
    assert "spark.x=1" in argv and argv[-2:] == [str(analysis.application_path()), str(tmp_path.resolve())]
    assert analysis.application_path() == REPO / "spark" / "analyze.py"
    monkeypatch.setenv("KAFKAPROOF_SPARK_MASTER", "local[1]")
    assert analysis.spark_submit_argv(tmp_path, spark_submit="s")[2] == "local[1]"


@pytest.mark.unit
def test_failed_job_raises_with_output_tail(tmp_path):
    run = golden.clean().write(tmp_path / "run")
    fake = tmp_path / "spark-submit"
    fake.write_text("#!/bin/sh\necho 'INFO noise'\necho 'Traceback: boom' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(AnalysisError, match="exited with 3(.|\n)*boom"):
        analysis.analyze(run, spark_submit=str(fake))
    with pytest.raises(LedgerError):
        analysis.analyze(tmp_path / "missing", spark_submit=str(fake))


@pytest.mark.unit
def test_shuffle_partitions_follow_the_ledger_size():
    assert [job.shuffle_partitions(n) for n in (0, 20_000, 1_000_000, 4_000_000, 40_000_000)] == [2, 2, 4, 16, 16]


@pytest.mark.unit
def test_run_locations_are_uris_local_paths_become_file_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert job.location("runs/r1/") == f"file://{tmp_path}/runs/r1"
    assert job.location("hdfs://nn:8020/kp/runs/r1/") == "hdfs://nn:8020/kp/runs/r1"
    assert job.location("file:/data/r1") == "file:/data/r1"
    assert job.location_name("s3a://bucket/runs/r1") == "r1"
    argv = analysis.spark_submit_argv(["runs/r1", "hdfs://nn/runs/r2"], master="local[2]", spark_submit="spark-submit")
    assert argv[-2:] == [str(tmp_path / "runs" / "r1"), "hdfs://nn/runs/r2"]


@pytest.mark.unit
def test_local_spark_stays_on_loopback():
    assert analysis.spark_env({}, master="local[2]")["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert "SPARK_LOCAL_IP" not in analysis.spark_env({}, master="spark://spark-master:7077")
    assert analysis.spark_env({"SPARK_LOCAL_IP": "10.1.2.3"})["SPARK_LOCAL_IP"] == "10.1.2.3"


# --------------------------------------------------------------------------- unit: was the check exercised?

def _fault(kind, target="node:1", **effect):
    return {"fault_id": f"{kind}-1", "kind": kind, "target": target, "start_ns": 10, "heal_ns": 20,
            "effect": json.dumps(effect), "proxy_fired": None}


@pytest.mark.unit
@pytest.mark.parametrize("fault, held", [
    (_fault("kill", node_states={"1": "dead"}), True),
    (_fault("kill", node_states={"1": "running"}), False),
    (_fault("pause", node_states={"1": "paused"}), True),
    (_fault("stop"), False),                                      # no evidence recorded: cannot pass
    (_fault("restart", restarted={"2": True}), True),
    (_fault("isolate", dropped_packets=0), False),
    (_fault("partition", dropped_packets=31), True),
    (_fault("bandwidth", tbf_overlimits=0, tbf_dropped=0), False),
    (_fault("bandwidth", tbf_overlimits=5), True),
    (_fault("lost_ack", target="all", proxy_fired=0), False),
    (_fault("latency", target="leader:0", proxy_fired=12), True),
    (_fault("kill", target="consumer:0", consumer_state="dead", consumer_restarted=True), True),
    (_fault("kill", target="consumer:0", consumer_state="dead", consumer_restarted=False), False),
    (_fault("pause", target="consumer:0", consumer_state="paused"), True),
    (_fault("kill", target="app:web", app_states={"web:0": "dead", "web:1": "dead"},
            app_restarted={"web:0": True, "web:1": True}), True),
    (_fault("kill", target="app:web", app_states={"web:0": "dead", "web:1": "running"}), False),
    (_fault("stop", target="app:web:0", app_states={"web:0": "dead"}, app_restarted={"web:0": False}), False),
    (_fault("pause", target="app:web:0", app_states={"web:0": "paused"}, app_resumed={"web:0": True}), True),
    (_fault("restart", target="app:web:0", app_states={"web:0": "running"}), False),  # no record it came back
    (_fault("restart", target="app:web:0", app_states={"web:0": "running"}, app_restarted={"web:0": True}), True),
    (_fault("kill", target="app:web"), False),
    (_fault("explode"), False),
])
def test_each_fault_kind_has_a_check_that_can_fail(fault, held):
    assert job.fault_effect(fault)[0] is held


@pytest.mark.unit
def test_an_app_faults_evidence_names_each_instance():
    fault = _fault("kill", target="app:web", app_states={"web:0": "dead", "web:1": "dead"},
                   app_restarted={"web:0": True, "web:1": False})
    assert job.fault_effect(fault) == (False, "web:0 dead, restarted; web:1 dead, NOT restarted")


@pytest.mark.unit
def test_exercised_conditions():
    snaps = [{"ts_ns": t, "partition": 0, "leader": leader, "isr": isr, "replicas": [1, 2, 3], "live_nodes": [1, 2, 3]}
             for t, leader, isr in ((1, 1, [1, 2, 3]), (2, 1, [1, 2]), (3, 2, [2]), (4, 2, [2, 3]))]
    faults = [{**_fault("kill", target="leader:0", node_states={"1": "dead"}), "start_ns": 3,
               "effect": json.dumps({"node_states": {"1": "dead"}, "scenario_index": 1})}]
    conditions = [{"check": "leader_change", "partition": 0}, {"check": "isr_shrink", "partition": 0, "before_fault": 1},
                  {"check": "isr_shrink", "partition": 0, "before_fault": 0}, {"check": "proxy_phase", "phase": "response_dropped"},
                  {"check": "aborted_in_log", "min": 2}, {"check": "consumer_restarted", "consumer": 0},
                  {"check": "send_errors", "outcome": "fail"}]
    results = job.exercise_results(faults, conditions, snaps, {"response_dropped": 0}, {0: 1}, 3,
                                   {"failed": 0, "indefinite": 4}, t0=0)
    assert [(r["check"], r["held"]) for r in results] == [
        ("fault_took_effect", True), ("leader_change", True), ("isr_shrink", True), ("isr_shrink", False),
        ("proxy_phase", False), ("aborted_in_log", True), ("consumer_restarted", True), ("send_errors", False)]
    assert "leader 1 -> 2" in results[1]["evidence"]
    assert "never injected" in results[3]["evidence"]


@pytest.mark.unit
def test_leaderless_windows():
    snaps = [{"ts_ns": t, "partition": 0, "leader": leader, "live_nodes": live}
             for t, leader, live in ((0, 1, [1, 2]), (1, -1, [2]), (2, 1, [2]), (3, 1, [1, 2]), (4, -1, [2]))]
    assert job.leaderless_windows(snaps) == [{"partition": 0, "start_ns": 1, "end_ns": 3},
                                             {"partition": 0, "start_ns": 4, "end_ns": 4, "open": True}]


@pytest.mark.unit
def test_a_large_local_ledger_gets_the_full_jit_a_small_one_and_a_uri_do_not(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from kafkaproof.analysis import submit
    table = pa.table({"x": list(range(7))})
    pq.write_table(table, tmp_path / "sends.parquet")
    pq.write_table(table, tmp_path / "reads.parquet")
    assert submit.ledger_rows(tmp_path) == 14
    monkeypatch.setattr(submit, "FULL_JIT_MIN_ROWS", 14)
    assert submit.size_conf([tmp_path]) == submit.FULL_JIT_CONF
    assert submit.size_conf(["hdfs://nn/runs/r1"]) == {}
    monkeypatch.setattr(submit, "FULL_JIT_MIN_ROWS", 15)
    assert submit.size_conf([tmp_path]) == {}


@pytest.mark.unit
def test_faults_together_holds_within_a_second_and_names_the_skew():
    def member(kind: str, start_ms: float, size: int = 2) -> dict:
        return {**_fault(kind, target="node:1"), "start_ns": int(start_ms * 1e6),
                "effect": json.dumps({"node_states": {"1": "dead" if kind == "kill" else "paused"}, "group": 3,
                                      "group_size": size})}
    together = lambda results: [r for r in results if r["check"] == "faults_together"]  # noqa: E731
    (close,) = together(job.exercise_results([member("kill", 10), member("pause", 12.5)], [], [], {}, {}, 0, {}, t0=0))
    assert close["held"] and close["subject"] == "group 3" and "2.5 ms apart" in close["evidence"]
    (far,) = together(job.exercise_results([member("kill", 10), member("pause", 1500)], [], [], {}, {}, 0, {}, t0=0))
    assert not far["held"] and "1490.0 ms apart" in far["evidence"]
    (short,) = together(job.exercise_results([member("kill", 10, 3), member("pause", 11, 3)], [], [], {}, {}, 0, {},
                                             t0=0))
    assert not short["held"] and "1 of the group's 3 never injected" in short["evidence"]
