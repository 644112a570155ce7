"""Analysis job, policy and verdicts, proven on golden histories (tests/golden.py).

The Spark job runs once per session over every golden run directory (one
spark-submit); the `spark` tests read its outputs. `unit` tests need no JVM.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import golden
from kafkaproof import analysis
from kafkaproof.errors import AnalysisError, LedgerError, ScenarioError
from kafkaproof.policy import (
    GUARANTEES,
    SUITES_DIR,
    Expect,
    PolicyError,
    judge,
    load_policy,
    normalize_expect,
    parse_policy,
    suites,
)
from kafkaproof.validation import format_result, validate

REPO = Path(__file__).resolve().parents[1]


def _load_job():
    spec = importlib.util.spec_from_file_location("kafkaproof_analyze_job", REPO / "spark" / "analyze.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


job = _load_job()
policy = load_policy()
GOLDENS = {name: build() for name, build in golden.GOLDENS.items()}


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Every golden written and analysed by ONE spark-submit; variants reuse their base's analysis."""
    root = tmp_path_factory.mktemp("golden")
    dirs = {name: g.write(root / name) for name, g in GOLDENS.items()}
    own = golden.needs_analysis(GOLDENS)
    analysis.analyze_many([dirs[n] for n in own], parallel=2,
                          extra_conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
    for name, g in GOLDENS.items():
        if g.analysis_from:
            shutil.copytree(dirs[g.analysis_from] / "analysis", dirs[name] / "analysis")
    return dirs


def metrics_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "analysis" / "metrics.json").read_text())


def anomalies_of(run_dir: Path):
    return pq.read_table(run_dir / "analysis" / "anomalies.parquet").to_pandas()


# --------------------------------------------------------------------------- spark: classification

@pytest.mark.spark
@pytest.mark.parametrize("name", list(GOLDENS))
def test_counts_exact(runs, name):
    want = {k: GOLDENS[name].counts.get(k, 0) for k in job.KINDS}
    assert metrics_of(runs[name])["counts"] == want


@pytest.mark.spark
@pytest.mark.parametrize("name", list(GOLDENS))
def test_value_ids_exact(runs, name):
    g = GOLDENS[name]
    frame = anomalies_of(runs[name])
    got = {k: sorted(int(v) for v in grp["value_id"].dropna()) for k, grp in frame.groupby("kind")}
    assert got == {k: sorted(v) for k, v in g.value_ids.items()}
    assert set(g.value_ids) == set(g.counts), "every expected kind names its value ids"


@pytest.mark.spark
@pytest.mark.parametrize("name", list(GOLDENS))
def test_verdict(runs, name):
    result = validate(runs[name])
    assert result.status == GOLDENS[name].status, format_result(result)
    assert result.success == (result.status == "pass")
    saved = json.loads((runs[name] / "validation" / "result.json").read_text())
    assert saved["status"] == result.status


@pytest.mark.spark
@pytest.mark.parametrize("name", [n for n, g in GOLDENS.items() if g.counts and g.analysis_from is None
                                  and "unseen" not in g.counts])
def test_each_guarantee_fails_exactly_when_it_forbids(runs, name):
    """The suites (through GX) fail a history under a guarantee iff the policy forbids one of its anomalies."""
    for guarantee in GUARANTEES:
        forbidden = set(policy.forbidden(guarantee, sorted(GOLDENS[name].claims))) & set(GOLDENS[name].counts)
        result = validate(runs[name], guarantee=guarantee, expect={"outcome": "pass"}, data_docs=False)
        assert result.status == ("fail" if forbidden else "pass"), (guarantee, format_result(result))
        assert {r.anomaly for r in result.failing} == forbidden


@pytest.mark.spark
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_clean_passes_every_guarantee(runs, guarantee):
    result = validate(runs["clean"], guarantee=guarantee, data_docs=False)
    assert result.status == "pass", format_result(result)
    # Aborted records read by a read_uncommitted consumer: only exactly-once forbids processing them.
    result = validate(runs["clean_txn"], guarantee=guarantee, data_docs=False)
    assert result.status == ("fail" if guarantee == "exactly-once" else "pass"), format_result(result)


@pytest.mark.spark
def test_negative_control_passes_only_when_detected(runs):
    assert validate(runs["lost"], expect={"outcome": "detect", "detect": ["lost"]}, data_docs=False).status == "pass"
    missing = validate(runs["lost"], expect={"outcome": "detect", "detect": ["lost", "duplicates"]}, data_docs=False)
    assert missing.status == "fail"
    assert [r.anomaly for r in missing.failing] == ["duplicates"]
    assert validate(runs["clean"], expect={"outcome": "detect", "detect": ["lost"]}, data_docs=False).status == "fail"


@pytest.mark.spark
def test_clean_metrics(runs):
    """Latency, availability and fault figures of the clean golden, derived by hand from its construction."""
    m = metrics_of(runs["clean"])
    assert {k: m["outcomes"][k] for k in ("sent", "acked", "failed", "indefinite", "consumed", "in_log", "reads")} == \
        {"sent": 60, "acked": 40, "failed": 19, "indefinite": 1, "consumed": 40, "in_log": 40, "reads": 40}
    pub = m["latency_ms"]["publish"]
    assert (pub["count"], pub["p50"], pub["p95"], pub["max"]) == (40, 5.0, 5.0, 50.0)
    assert m["latency_ms"]["end_to_end"]["p50"] == 60.0
    assert m["latency_ms"]["publish_delay"]["max"] == 0.0
    assert m["latency_ms_by_fault"]["f1"]["publish"]["count"] == 1      # the ack sent at exactly 4.0 s (heal)
    assert m["latency_ms_by_fault"]["(none)"]["publish"]["count"] == 39
    av = m["availability"]
    assert (av["attempted"], av["acked"], av["seconds_unavailable"]) == (60, 40, 2)
    assert av["unavailability_windows"] == [{"start_s": 2, "end_s": 3, "seconds": 2}]
    (f,) = m["faults"]
    assert f["fault_id"] == "f1" and f["time_to_first_error_ms"] == 500.0
    assert f["last_error_s"] == pytest.approx(4.4)
    assert f["acks_resume_ms"] == pytest.approx(2405.0)
    assert f["recovery_after_heal_ms"] == pytest.approx(405.0)
    assert f["max_ack_gap_ms"] == pytest.approx(2005.0)
    assert m["complete"] is True


@pytest.mark.spark
def test_output_schemas(runs):
    d = runs["clean"] / "analysis"
    values = pq.read_table(d / "values.parquet").to_pandas()
    assert values["value_id"].is_unique and len(values) == 60
    assert {"value_id", "outcome", "log_count", "read_count", "lost", "unseen", "duplicate", "not_delivered",
            "aborted_read", "indefinite_landed", "unknown_value"} <= set(values.columns)
    anomalies = pq.read_table(d / "anomalies.parquet").schema.names
    assert anomalies == ["kind", "value_id", "producer", "partition", "offset", "offsets", "value_ids", "consumer",
                         "consumer_pid", "group", "t_start_ns", "t_end_ns", "detail", "cause_fault_id", "cause",
                         "t_s", "fault_ids", "fault_kinds", "fault_targets"]
    ts = pq.read_table(d / "timeseries.parquet").to_pandas()
    assert list(ts["second"]) == list(range(6))
    assert list(ts["attempted"]) == [10] * 6
    assert list(ts["active_faults"].map(list)) == [[], [], ["f1"], ["f1"], ["f1"], []]


@pytest.mark.spark
def test_anomaly_rows_name_their_faults(runs):
    rows = anomalies_of(runs["lost"])
    assert set(rows["kind"]) == {"lost", "ack_offset_mismatch", "inconsistent_offsets"}
    lost = rows[rows["kind"] == "lost"].iloc[0]
    assert list(lost["fault_ids"]) == ["f1"] and list(lost["fault_kinds"]) == ["kill"]
    incons = rows[rows["kind"] == "inconsistent_offsets"].iloc[0]
    assert sorted(incons["value_ids"]) == [2, 3]  # X acked there, Y logged there


@pytest.mark.spark
def test_duplicates_are_attributed_to_the_lost_ack_that_caused_them(runs):
    g = GOLDENS["lost_ack_attribution"]
    rows = anomalies_of(runs["lost_ack_attribution"])
    got = {int(r["value_id"]): (None if r["cause_fault_id"] is None else r["cause_fault_id"])
           for _, r in rows.iterrows()}
    assert got == g.causes
    first = rows[rows["value_id"] == min(g.value_ids["duplicates"])].iloc[0]
    assert "offsets 1..2" in first["cause"] and "correlation id 1" in first["cause"] and "lost ack" in first["cause"]
    assert first["cause"] in first["detail"]
    pipelined = rows[rows["value_id"] == max(g.value_ids["duplicates"])].iloc[0]
    assert "offsets 8..8" in pipelined["cause"] and "correlation id 3" in pipelined["cause"]
    assert "discarded when the fault proxy reset the connection" in pipelined["cause"]
    att = metrics_of(runs["lost_ack_attribution"])["attribution"]
    assert att["unacknowledged_writes"] == 3 and att["unacknowledged_records"] == 4  # other topic ignored
    assert att["kinds"]["duplicates"] == {"attributed": 3, "unattributed": 1, "by_fault": {"la": 3}}
    assert att["kinds"]["indefinite_landed"] == {"attributed": 1, "unattributed": 0, "by_fault": {"la": 1}}
    # without proxy events nothing is attributed, and the metrics say so
    plain = metrics_of(runs["duplicates"])["attribution"]
    assert plain["unacknowledged_writes"] == 0
    assert plain["kinds"]["duplicates"] == {"attributed": 0, "unattributed": 1, "by_fault": {}}


@pytest.mark.unit
def test_unacknowledged_writes_from_proxy_events():
    def row(phase, base, counts, topic="t", ts=1, fault="f", action="lost_ack"):
        return {"ts_ns": ts, "fault_id": fault, "rule_id": fault, "broker": 2, "conn": 1, "correlation_id": 9,
                "action": action, "phase": phase, "topic": topic, "partitions": [0, 1],
                "base_offsets": base, "record_counts": counts}
    writes = job.unacknowledged_writes([
        row("request_forwarded", None, [3, 1]),
        row("response_dropped", [10, -1], [3, 1]),              # partition 1 answered an error: nothing written
        row("response_replaced", [20, 5], None, ts=2),          # count unknown: the base offset alone
        row("response_dropped", [10, -1], [3, 1], ts=3),        # the same write reported again: kept once
        row("response_dropped", [99, 99], [1, 1], topic="u"),   # another topic
        row("response_discarded", [30, -1], [2, 1], ts=4),      # answered, lost in the reset behind a lost ack
        row("response_discarded", None, [4, 4], ts=5),          # no answer yet: nothing known to be written
        row("response_discarded", [40, -1], [1, 1], ts=6, fault="slow", action="latency"),  # held until given up
    ], "t")
    assert [(w["partition"], w["first_offset"], w["last_offset"], w["phase"]) for w in writes] == [
        (0, 10, 12, "response_dropped"), (0, 20, 20, "response_replaced"), (0, 30, 31, "response_discarded"),
        (0, 40, 40, "response_discarded"), (1, 5, 5, "response_replaced")]
    assert "whose response the fault proxy dropped (lost ack): fault f" in job.cause_text(writes[0])
    assert "whose response the fault proxy replaced with an error" in job.cause_text(writes[1])
    assert "whose response was discarded when the fault proxy reset the connection: fault f" in \
        job.cause_text(writes[2])
    assert "whose response the fault proxy held back until the client gave up on it (closed the connection): " \
           "fault slow" in job.cause_text(writes[3])
    assert job.unacknowledged_writes([], "t") == []


@pytest.mark.spark
def test_data_docs_and_format(runs):
    result = validate(runs["lost"])
    assert result.data_docs is not None and result.data_docs.exists()
    assert result.data_docs == runs["lost"] / "validation" / "data_docs" / "index.html"
    text = format_result(result)
    assert text.startswith("FAIL")
    assert "lost" in text and "e.g. value ids 2" in text


@pytest.mark.spark
def test_validate_without_analysis_is_an_error(tmp_path):
    run = golden.clean().write(tmp_path / "run")
    result = validate(run)
    assert result.status == "error" and "no analysis" in result.errors[0]


# --------------------------------------------------------------------------- unit: policy

@pytest.mark.unit
def test_policy_covers_every_kind_of_the_job():
    # spark/analyze.py runs without the package, so it keeps a checked copy of the vocabulary
    from kafkaproof import anomalies
    from kafkaproof.policy import VALUE_FLAGS
    from kafkaproof.scenario import ANOMALIES
    assert policy.names == job.KINDS == anomalies.KINDS
    assert VALUE_FLAGS == job.VALUE_FLAGS == anomalies.VALUE_FLAGS
    assert set(ANOMALIES) <= set(job.KINDS), "every anomaly a scenario may expect is one the job counts"


@pytest.mark.unit
def test_hard_kinds_never_allowed_and_guarantees_as_documented():
    for g in GUARANTEES:
        forbidden = set(policy.forbidden(g))
        assert {"lost", "inconsistent_offsets", "ack_offset_mismatch", "aborted_reads", "unknown_values"} <= forbidden
        assert "indefinite_landed" not in forbidden
    assert {"duplicates", "redeliveries"} <= policy.allowed("at-least-once")
    assert {"not_delivered", "lost_unconfirmed", "poll_skips"} & set(policy.forbidden("at-least-once")) == \
        {"not_delivered", "lost_unconfirmed", "poll_skips"}
    assert {"duplicates", "redeliveries", "poll_rewinds"} <= set(policy.forbidden("at-most-once"))
    # exactly-once allows nothing, except what only an application-level claim judges
    assert policy.allowed_by["exactly-once"] == frozenset().union(*policy.forbidden_by_claim.values())
    assert "dirty_reads" in policy.forbidden("exactly-once") and "dirty_reads" in policy.allowed("at-least-once")
    assert "undelivered_attempts" in policy.forbidden("at-least-once", ["delivery"])


@pytest.mark.unit
def test_policy_refuses_allowing_a_hard_kind():
    raw = {"kinds": {"lost": {"class": "hard"}}, "guarantees": {g: {"allowed": []} for g in GUARANTEES}}
    parse_policy(raw)
    raw["guarantees"]["at-most-once"]["allowed"] = ["lost"]
    with pytest.raises(PolicyError, match="hard kind"):
        parse_policy(raw)


@pytest.mark.unit
def test_generated_suites_are_in_sync_with_the_policy():
    for g in GUARANTEES:
        for spec in suites(policy, g, Expect()).values():
            path = SUITES_DIR / f"{spec['name']}.json"
            assert path.exists(), f"{path} missing: python -m kafkaproof.policy write-suites"
            assert json.loads(path.read_text()) == spec, f"{path} stale: python -m kafkaproof.policy write-suites"


@pytest.mark.unit
def test_normalize_expect():
    assert normalize_expect(None, policy) == Expect()
    assert normalize_expect({"outcome": "pass", "detect": []}, policy) == Expect()
    assert normalize_expect({"outcome": "detect", "detect": ["lost"]}, policy) == Expect("detect", ("lost",))
    for bad in ({"outcome": "detect", "detect": []}, {"outcome": "maybe"}, {"outcome": "detect", "detect": ["nope"]}):
        with pytest.raises(ScenarioError):
            normalize_expect(bad, policy)


@pytest.mark.unit
def test_judge():
    rows = {r.anomaly: r for r in judge({"duplicates": 3, "lost": 0}, policy, "at-least-once", Expect())}
    assert rows["duplicates"].ok and rows["duplicates"].allowed and rows["lost"].ok and not rows["lost"].allowed
    rows = {r.anomaly: r for r in judge({"duplicates": 3}, policy, "exactly-once", Expect())}
    assert not rows["duplicates"].ok
    rows = {r.anomaly: r for r in judge({"unseen": 1, "lost": 2}, policy, "at-least-once", Expect("detect", ("lost",)))}
    assert rows["lost"].ok and rows["lost"].expected_detected and not rows["unseen"].ok


@pytest.mark.unit
def test_unknown_guarantee_is_a_scenario_error(tmp_path):
    run = golden.clean().write(tmp_path / "run")
    with pytest.raises(ScenarioError, match="guarantee"):
        validate(run, guarantee="twice")
    with pytest.raises(LedgerError):
        validate(tmp_path / "nowhere")


# --------------------------------------------------------------------------- unit: job helpers, wrapper

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
def test_shuffle_partitions_follow_the_ledger_size(tmp_path):
    assert [job.shuffle_partitions(n) for n in (0, 20_000, 1_000_000, 4_000_000, 40_000_000)] == [2, 2, 4, 16, 16]
    pa_table = pytest.importorskip("pyarrow").table({"x": list(range(7))})
    import pyarrow.parquet as pq
    pq.write_table(pa_table, tmp_path / "sends.parquet")
    pq.write_table(pa_table, tmp_path / "reads.parquet")
    assert job.ledger_rows(tmp_path) == 14


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
    (_fault("explode"), False),
])
def test_each_fault_kind_has_a_check_that_can_fail(fault, held):
    assert job.fault_effect(fault)[0] is held


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
