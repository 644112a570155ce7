"""The analysis job and the verdicts, proven on golden histories (tests/golden.py).

The Spark job runs once per session over every golden run directory (one spark-submit);
these tests read its outputs. The job's pure parts and the policy are unit-tested in
tests/unit/analysis and tests/unit/verdict.

For local iteration, `KAFKAPROOF_GOLDENS=a,b` restricts the goldens to those named (and the goldens whose
analysis they reuse); tests of goldens left out are skipped, e.g.
`KAFKAPROOF_GOLDENS=pipeline_clean,pipeline_every_kind flock /tmp/kafkaproof-heavy.lock python -m pytest
tests/spark/test_goldens.py -q`. Unset (as in `make test`): every golden.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import golden
import golden_commits
from kafkaproof import analysis
from kafkaproof.errors import ScenarioError
from kafkaproof.verdict.policy import GUARANTEES, load_policy
from kafkaproof.verdict.validation import format_result, validate

from support import SparkStandalone, load_analysis_job

# One spark-submit analyses every golden (51 of 63 need their own analysis) inside the first test's setup, which
# the suite's 600 s per-test timeout also covers: on a loaded 2-core host it outgrew it (CI, 2026-11-29).
pytestmark = pytest.mark.timeout(1800)


job = load_analysis_job()
policy = load_policy()


def selected(names: str | None, goldens: dict) -> dict:
    """The goldens `KAFKAPROOF_GOLDENS` names (all when unset), with those whose analysis they reuse."""
    if not names:
        return goldens
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = sorted(wanted - set(goldens))
    if unknown:
        raise ValueError(f"KAFKAPROOF_GOLDENS names unknown goldens {unknown}; known: {', '.join(goldens)}")
    wanted |= {goldens[n].analysis_from for n in wanted if goldens[n].analysis_from}
    return {n: g for n, g in goldens.items() if n in wanted}


class Selection(dict):
    """By golden name; a golden `KAFKAPROOF_GOLDENS` left out skips the test asking for it."""

    def __missing__(self, name: str):
        pytest.skip(f"golden {name} not selected by KAFKAPROOF_GOLDENS")


ALL_GOLDENS = {name: build() for name, build in {**golden.GOLDENS, **golden_commits.GOLDENS}.items()}
GOLDENS = Selection(selected(os.environ.get("KAFKAPROOF_GOLDENS"), ALL_GOLDENS))


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Every golden written and analysed by ONE spark-submit; variants reuse their base's analysis."""
    root = tmp_path_factory.mktemp("golden")
    dirs = Selection({name: g.write(root / name) for name, g in GOLDENS.items()})
    own = golden.needs_analysis(GOLDENS)
    analysis.analyze_many([dirs[n] for n in own], parallel=2,
                          extra_conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
    for name, g in GOLDENS.items():
        if g.analysis_from:
            shutil.copytree(dirs[g.analysis_from] / "analysis", dirs[name] / "analysis")
    return dirs


def metrics_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "analysis" / "metrics.json").read_text())


def timing_free(metrics: dict) -> dict:
    """Metrics without the job's own timings (they differ between any two runs)."""
    return {k: v for k, v in metrics.items() if k not in ("job_seconds", "job_phases")}


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
                                  and g.status != "error"])  # unseen, nothing to judge: never judged
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
def test_clock_faults_count_the_log_timestamps_that_go_backwards(runs):
    stamps = metrics_of(runs["clock_timestamps"])["timestamps"]
    assert stamps["regressions"] == 2 and stamps["max_back_ms"] == 3_599_900
    assert [(e["partition"], e["offset"], e["back_ms"]) for e in stamps["examples"]] == [(0, 30, 3_599_900),
                                                                                         (0, 35, 900)]
    assert metrics_of(runs["clean"])["timestamps"] is None  # no clock fault: not computed


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


@pytest.mark.spark
def test_duplicates_of_every_request_in_flight_at_a_reset_are_attributed(runs):
    g = GOLDENS["reset_in_flight_attribution"]
    rows = anomalies_of(runs["reset_in_flight_attribution"])
    assert {int(r["value_id"]): r["cause_fault_id"] for _, r in rows.iterrows()} == g.causes
    after = rows[rows["offset"] == 3].iloc[0]  # the answer the broker gave after the reset
    assert "offsets 3..4" in after["cause"] and "correlation id 3" in after["cause"]
    assert "discarded when the fault proxy reset the connection" in after["cause"]
    overtaken = rows[rows["offset"] == 11].iloc[0]  # its retry landed first: the later copy is the lost write
    assert overtaken["cause"].startswith("later copy (the retry landed first) is the write at offsets 12..12")
    assert overtaken["cause"] in overtaken["detail"]
    att = metrics_of(runs["reset_in_flight_attribution"])["attribution"]
    assert att["unacknowledged_writes"] == 4 and att["unacknowledged_records"] == 5
    assert att["kinds"]["duplicates"] == {"attributed": 5, "unattributed": 1, "by_fault": {"la": 5}}


@pytest.mark.spark
def test_duplicates_of_answers_written_just_before_a_reset_are_attributed_and_nothing_else(runs):
    g = GOLDENS["unread_answer_attribution"]
    rows = anomalies_of(runs["unread_answer_attribution"])
    assert {int(r["value_id"]): r["cause_fault_id"] for _, r in rows.iterrows()} == g.causes
    unread = rows[rows["offset"] == 1].iloc[0]
    assert "offsets 1..1" in unread["cause"] and "correlation id 1" in unread["cause"]
    assert "wrote to the client just before it reset the connection, unread by the client" in unread["cause"]
    att = metrics_of(runs["unread_answer_attribution"])["attribution"]
    assert att["unacknowledged_writes"] == 4
    assert att["kinds"]["duplicates"] == {"attributed": 2, "unattributed": 0, "by_fault": {"la": 2}}
    assert att["kinds"]["indefinite_landed"] == {"attributed": 0, "unattributed": 1, "by_fault": {}}


@pytest.mark.spark
def test_data_docs_and_format(runs):
    result = validate(runs["lost"])
    assert result.data_docs is not None and result.data_docs.exists()
    assert result.data_docs == runs["lost"] / "validation" / "data_docs" / "index.html"
    text = format_result(result)
    assert text.startswith("FAIL")
    assert "lost" in text and "e.g. value ids 2" in text


@pytest.mark.spark
def test_verdict_truth_issue_36(runs):
    """Every value at a contested offset, duplicates only the acks and reads saw, empty runs, forbidden
    anomalies in a negative control, and a violation beside an unconfirmed fault."""
    g = GOLDENS["many_values_at_one_offset"]
    rows = anomalies_of(runs["many_values_at_one_offset"])
    (incons,) = rows[rows["kind"] == "inconsistent_offsets"]["value_ids"]
    assert sorted(incons) == sorted(g.value_ids["lost"] + [max(g.value_ids["lost"]) + (1 << 32)])  # all ten
    mism = rows[rows["kind"] == "ack_offset_mismatch"]
    assert sorted(mism["value_id"]) == g.value_ids["lost"] and set(mism["offset"]) == {0}

    (dup,) = anomalies_of(runs["observed_duplicates"]).itertuples()
    assert list(dup.offsets) == [1, 2] and "observed at offsets 1, 2 of partition 0" in dup.detail
    values = pq.read_table(runs["observed_duplicates"] / "analysis" / "values.parquet").to_pandas()
    assert values["observed_duplicate"].sum() == 1 and not values["duplicate"].any()

    assert validate(runs["empty_run"], data_docs=False).errors == [
        "nothing to judge: 0 sends; the run tested nothing it claims"]
    assert "read nothing at all" in validate(runs["consumers_read_nothing"], data_docs=False).errors[0]

    control = validate(runs["control_also_found"], data_docs=False)
    assert {r.anomaly for r in control.rows if r.also_found} == {"inconsistent_offsets", "ack_offset_mismatch"}
    text = format_result(control)
    assert text.count("also found (forbidden by the guarantee)") == 2 and "allowed" not in text

    failed = validate(runs["violation_not_exercised"], data_docs=False)
    assert failed.status == "fail" and failed.errors == []
    (why,) = failed.unconfirmed
    assert "kill leader:0 (f1)" in why and f"unconfirmed: {why}" in format_result(failed)


@pytest.mark.spark
def test_validate_without_analysis_is_an_error(tmp_path):
    run = golden.clean().write(tmp_path / "run")
    result = validate(run)
    assert result.status == "error" and "no analysis" in result.errors[0]




@pytest.mark.spark
def test_the_pipeline_claim_names_hanging_transactions_and_is_never_passed_without_its_ledger(runs):
    """Issue 43: metrics' `pipeline` section, the rows' sentences, and the claim on a run without the ledger."""
    m = metrics_of(runs["pipeline_every_kind"])["pipeline"]
    assert m["applicable"] is True and m["transactions"] == {"committed": 9, "aborted": 3, "indefinite": 1}
    assert m["hanging"] == [{"txn": 10, "transactional_id": "copier-5", "producer_id": 105, "epoch": 0,
                             "copier": 5, "partitions": [5]}]
    rows = anomalies_of(runs["pipeline_every_kind"])
    (hang,) = rows[rows["kind"] == "hanging_transaction"].itertuples()
    assert "transactional id copier-5, producer id 105, epoch 0" in hang.detail and list(hang.value_ids) == [16]
    (early,) = rows[rows["kind"] == "precommitted_read"].itertuples()
    assert "0.020 s before transaction 5's commit was requested" in early.detail
    assert metrics_of(runs["pipeline_clean"])["pipeline"]["reads"] == {"read_committed": 8}

    result = validate(runs["pipeline_not_applicable"], data_docs=False)
    assert result.status == "error" and result.errors == [
        "not applicable: claim exactly_once_pipeline: no pipeline ledger (transactions.parquet, "
        "transaction_records.parquet, output_reads.parquet, output_audit.parquet, pipeline_partitions.parquet "
        "missing); the run tested nothing it claims"]
    assert {r.anomaly for r in result.rows if r.not_applicable} == set(policy.forbidden_by_claim["exactly_once_pipeline"])
    assert metrics_of(runs["clean"])["pipeline"]["applicable"] is False
    shown = validate(runs["pipeline_unclaimed"], data_docs=False)  # counted, shown, judged by the claim only
    assert shown.status == "pass" and {r.anomaly for r in shown.rows if r.count} == set(GOLDENS["pipeline_unclaimed"].counts)


@pytest.mark.spark
def test_a_delayed_produce_landed_in_a_later_transaction_and_a_stalled_lso_are_named(runs):
    """Issue 43: the late write names its aborted transaction and the one it landed in; the LSO stall names
    the blocking transaction (producer id, epoch, copier) and how long committed records waited; both fail."""
    rows = anomalies_of(runs["pipeline_delayed_produce"])
    (late,) = rows[rows["kind"] == "eos_late_write"].itertuples()
    assert ("offset 5 of output partition 0 (value 0) was written by transaction 0 (transactional id copier-0, "
            "producer id 100, epoch 0), which its copier aborted" in late.detail)
    assert "landed in a later transaction (1) that committed it" in late.detail
    assert metrics_of(runs["pipeline_delayed_produce"])["pipeline"]["late_writes"] == 1
    assert validate(runs["pipeline_delayed_produce"], data_docs=False).status == "fail"

    rows = anomalies_of(runs["pipeline_hanging"])
    (stall,) = rows[rows["kind"] == "lso_stall"].itertuples()
    assert ("the last stable offset of output partition 0 stood at offset 3 behind transaction 1 (transactional id "
            "copier-0, producer id 100, epoch 0, copier 0, never ended by its copier)" in stall.detail)
    assert "2 committed records waited up to 38.0 s" in stall.detail and "(20 s)" in stall.detail
    m = metrics_of(runs["pipeline_hanging"])["pipeline"]
    assert m["lso_stall_threshold_s"] == 20.0
    assert m["lso_stalls"] == [{"partition": 0, "offset": 3, "txn": 1, "transactional_id": "copier-0",
                                "producer_id": 100, "epoch": 0, "max_wait_s": 38.0, "records_waited": 2}]
    assert [h["txn"] for h in m["hanging"]] == [3] and m["hanging"][0]["partitions"] == [1]
    assert validate(runs["pipeline_hanging"], data_docs=False).status == "fail"


@pytest.mark.spark
def test_the_share_claim_counts_outcomes_and_is_never_passed_without_its_ledger(runs):
    """Issue 46: metrics' `share` section (outcomes per record), the rows' sentences, and the claim without the
    share ledger."""
    from golden_share import SHARE_CLEAN_OUTCOMES

    m = metrics_of(runs["share_clean"])["share"]
    assert m["applicable"] is True and m["outcomes"] == SHARE_CLEAN_OUTCOMES
    assert (m["delivery_limit"], m["lock_timeout_ms"], m["deliveries"], m["redeliveries"]) == (3, 1000, 14, 5)
    assert m["acks"] == {"accept": {"ok": 7, "failed": 1}, "release": {"ok": 3, "failed": 0},
                         "reject": {"ok": 1, "failed": 0}}
    rows = anomalies_of(runs["share_every_kind"])
    (held,) = rows[rows["kind"] == "share_concurrent_acquisition"].itertuples()
    assert "acquired by consumer 1 (delivery 2) 0.500 s before an earlier delivery" in held.detail
    (past,) = rows[rows["kind"] == "share_past_limit"].itertuples()
    assert "delivery count 4; the group's limit is 3" in past.detail
    result = validate(runs["share_not_applicable"], data_docs=False)
    assert result.status == "error" and result.errors == [
        "not applicable: claim share_group: no share ledger (share_deliveries.parquet, share_acks.parquet, "
        "share_members.parquet missing); the run tested nothing it claims"]
    assert {r.anomaly for r in result.rows if r.not_applicable} == set(policy.forbidden_by_claim["share_group"])


@pytest.mark.spark
def test_lost_acknowledgements_are_unconfirmed_and_a_leader_change_exempts_redeliveries(runs):
    """Issue 46: outcome `unconfirmed` (a failed accept or reject never followed by a delivery), and the failover
    exemption (a share-partition leader change between two deliveries), whose count jump stays an anomaly."""
    from golden_share import SHARE_UNCONFIRMED_OUTCOMES

    m = metrics_of(runs["share_unconfirmed"])["share"]
    assert m["outcomes"] == SHARE_UNCONFIRMED_OUTCOMES and m["failover_redeliveries"] == 0
    assert m["acks"]["accept"] == {"ok": 5, "failed": 2} and m["acks"]["reject"] == {"ok": 0, "failed": 1}
    failover = metrics_of(runs["share_failover"])["share"]
    assert failover["failover_redeliveries"] == 3 and failover["redeliveries"] == 6
    assert failover["outcomes"]["accepted"] == 4
    rows = anomalies_of(runs["share_failover"])
    (jump,) = rows[rows["kind"] == "share_delivery_count"].itertuples()
    assert "with delivery count 3 after count 1 (expected at most 2: its partition's leader changed in between)" \
        in jump.detail
    (held,) = rows[rows["kind"] == "share_concurrent_acquisition"].itertuples()
    assert (held.partition, held.offset) == (1, 0)


# --------------------------------------------------------------------------- spark: on a real cluster

def _table(path: Path):
    """A result table in a canonical row order (Spark's partitioning decides the written order)."""
    frame = pq.read_table(path).to_pandas()
    return frame.sort_values(list(frame.columns), kind="stable", key=lambda c: c.astype(str)).reset_index(drop=True)


@pytest.mark.long
@pytest.mark.spark
def test_a_spark_standalone_cluster_gives_exactly_the_local_results(runs, tmp_path):
    """The job on a master and a worker (separate JVMs, executors over the network) equals local mode's.

    A third of the goldens, one of each family (value, offset, poll, transaction, cause, claim and
    clock checks), keeps the test at about a minute; every golden runs in local mode above."""
    own = ["clean", "clean_txn", "lost", "duplicates", "lost_ack_attribution", "inconsistent_offsets",
           "poll_rewinds", "undelivered_attempts", "clock_timestamps"]
    assert set(own) <= set(golden.needs_analysis(ALL_GOLDENS))
    dirs = {name: GOLDENS[name].write(tmp_path / "runs" / name) for name in own}
    with SparkStandalone(tmp_path / "spark", cores=2) as spark:
        analysis.analyze_many(list(dirs.values()), master=spark.url, parallel=2, quiet=True,
                              extra_conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
        assert spark.apps() == [("kafkaproof-analyze", "FINISHED")]
    for name in own:
        assert timing_free(metrics_of(dirs[name])) == timing_free(metrics_of(runs[name])), name
        for table in ("anomalies", "values", "timeseries"):
            assert _table(dirs[name] / "analysis" / f"{table}.parquet").equals(
                _table(runs[name] / "analysis" / f"{table}.parquet")), f"{name}: {table}"


@pytest.mark.spark
def test_run_directories_behind_a_hadoop_uri_give_exactly_the_local_results(runs, tmp_path):
    """Run directories under a viewfs:// mount, which no local path names: the job must read the
    manifest, the footers and the ledger and publish its results through Hadoop's FileSystem API
    only (as on HDFS or S3), and its results equal those of local paths."""
    names = ["clean", "lost_ack_attribution", "poll_rewinds"]
    store = tmp_path / "store"
    dirs = {name: GOLDENS[name].write(store / name) for name in names}
    analysis.analyze_locations([f"viewfs://kp/runs/{name}" for name in names], parallel=2, quiet=True,
                    extra_conf={"spark.hadoop.fs.viewfs.mounttable.kp.link./runs": f"file://{store}",
                                "spark.sql.shuffle.partitions": "1", "spark.driver.memory": "2g"})
    for name in names:
        assert timing_free(metrics_of(dirs[name])) == timing_free(metrics_of(runs[name])), name
        for table in ("anomalies", "values", "timeseries"):
            assert _table(dirs[name] / "analysis" / f"{table}.parquet").equals(
                _table(runs[name] / "analysis" / f"{table}.parquet")), f"{name}: {table}"
        assert not (dirs[name] / "analysis.tmp").exists()


@pytest.mark.spark
def test_an_application_run_reports_what_it_cannot_judge_as_not_applicable(runs):
    """Issue 39: the loss is judged as for kafkaproof's producers; the checks the application's data cannot
    show are `n/a` with the manifest's reason, never passed."""
    result = validate(runs["app_answer_before_ack"], data_docs=False)
    assert result.status == "pass", format_result(result)
    rows = {r.anomaly: r for r in result.rows}
    assert rows["lost"].count == 2 and rows["lost"].expected_detected and rows["lost"].not_applicable is None
    assert "poll order" in rows["poll_skips"].not_applicable and "concurrently" in rows["reordering"].not_applicable
    assert "n/a" in format_result(result) and "not applicable: " in format_result(result)
    bad = validate(runs["app_answer_before_ack"], expect={"outcome": "detect", "detect": ["reordering"]},
                   data_docs=False)
    assert bad.status == "error" and any("reordering does not apply" in e for e in bad.errors)


@pytest.mark.spark
def test_commit_checks_say_what_the_group_committed_and_a_scenario_may_allow_them_with_a_reason(runs, tmp_path):
    """Issue 45: each commit-consistency row names the commit and the reads; `allow: {kind: reason}` turns a
    forbidden kind into a pass that shows the reason; an empty reason is refused, naming file and field."""
    def row(name, kind):
        (r,) = anomalies_of(runs[name]).query("kind == @kind").itertuples()
        return r
    rewind = row("commit_rewind", "rewind_below_commit")
    assert list(rewind.offsets) == [10, 0] and rewind.consumer_pid == 3001 and rewind.group == "g"
    assert "started partition 0 at offset 0, 10 below the group's last commit 10" in rewind.detail
    assert "3 records in between were never read by the group" in row("commit_skip", "skip_above_commit").detail
    assert "committed offset 8 of partition 0 while 3 records below it were not read by the group yet" in row(
        "commit_beyond_read", "commit_beyond_read").detail
    assert list(row("commit_regression", "commit_regression").offsets) == [10, 4]
    double = row("double_ownership", "double_ownership")
    assert "consumer 1 (pid 2001) read partition 0 from offset 10 while consumer 0 (pid 2000)" in double.detail

    allowed = validate(runs["commit_rewind_allowed"], data_docs=False)
    assert allowed.status == "pass", format_result(allowed)
    (r,) = [r for r in allowed.rows if r.anomaly == "rewind_below_commit"]
    assert r.ok and r.count == 1 and r.allowed_reason == golden_commits.commit_rewind_allowed().allow[r.anomaly]
    assert f"allowable with reason: {r.allowed_reason}" in format_result(allowed)

    bad = shutil.copytree(runs["commit_rewind_allowed"], tmp_path / "bad")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["scenario"]["allow"] = {"rewind_below_commit": ""}
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ScenarioError, match="manifest.json: scenario: allow.rewind_below_commit: needs a non-empty"):
        validate(bad, data_docs=False)
