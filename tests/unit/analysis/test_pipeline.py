"""The exactly-once pipeline checks' pure parts (spark/kafkaproof_analysis/pipeline.py), the pipeline ledger's
contract, the claim's policy and the golden pipeline histories' shape, without a JVM (issue 43 step 1)."""
from __future__ import annotations

import pytest

import golden
from support import load_analysis_job

from kafkaproof.spec import anomalies, ledger
from kafkaproof.spec.pipeline_ledger import PIPELINE_TABLES, TXN_OUTCOMES
from kafkaproof.verdict.policy import GUARANTEES, load_policy
from kafkaproof.verdict.validation import PIPELINE_CLAIM, claim_not_applicable

pytestmark = pytest.mark.unit

job = load_analysis_job()
policy = load_policy()
EOS_KINDS = ("eos_lost", "eos_duplicated", "eos_aborted_read", "precommitted_read", "offsets_outputs_disagree",
             "eos_late_write", "hanging_transaction", "lso_stall")


def test_the_pipeline_tables_are_optional_ledger_tables_the_job_knows():
    assert tuple(PIPELINE_TABLES) == job.PIPELINE_TABLES
    assert set(PIPELINE_TABLES) <= set(ledger.OPTIONAL_TABLES) and set(PIPELINE_TABLES) <= set(job.SCHEMAS)
    assert not set(PIPELINE_TABLES) & set(job.REQUIRED_TABLES)


def test_missing_tables_in_ledger_order():
    assert job.missing_tables({t: True for t in PIPELINE_TABLES}) == []
    assert job.missing_tables({}) == list(PIPELINE_TABLES)
    assert job.missing_tables({"transactions": True, "output_reads": False}) == [
        "transaction_records", "output_reads", "output_audit", "pipeline_partitions"]


def test_the_lso_stall_threshold_is_the_transaction_timeout_plus_the_coordinators_check_interval():
    assert job.lso_stall_threshold_ns({}) == 20_000_000_000
    assert job.lso_stall_threshold_ns({"scenario": {"pipeline": {"transaction_timeout_ms": 30_000}}}) == 40_000_000_000


def test_metrics_say_why_the_pipeline_is_not_applicable():
    assert job.pipeline_metrics_base([]) == {"applicable": True, "missing_tables": [], "reason": None}
    base = job.pipeline_metrics_base(["output_reads"])
    assert base["applicable"] is False and base["reason"] == "no pipeline ledger (output_reads.parquet missing)"


def test_the_claim_forbids_the_pipeline_kinds_every_guarantee_allows():
    assert policy.forbidden_by_claim[PIPELINE_CLAIM] == frozenset(EOS_KINDS)
    for g in GUARANTEES:
        assert not set(EOS_KINDS) & set(policy.forbidden(g))
        assert set(EOS_KINDS) <= set(policy.forbidden(g, [PIPELINE_CLAIM]))
        assert "eos_dirty_read" not in policy.forbidden(g, [PIPELINE_CLAIM])  # the negative control: shown only
    assert policy.kind("eos_dirty_read").cls == "info" and "eos_dirty_read" in anomalies.EXPECTABLE
    assert set(EOS_KINDS) | {"eos_dirty_read"} <= set(job.KINDS)


def test_the_claim_is_not_applicable_without_the_pipeline_ledger():
    absent = {"pipeline": job.pipeline_metrics_base(["transactions"])}
    na = claim_not_applicable(absent, [PIPELINE_CLAIM], policy)
    assert sorted(na) == sorted(EOS_KINDS)
    assert all(why == "claim exactly_once_pipeline: no pipeline ledger (transactions.parquet missing)"
               for why in na.values())
    assert "analysed before" in claim_not_applicable({}, [PIPELINE_CLAIM], policy)["eos_lost"]
    assert claim_not_applicable(absent, [], policy) == {}  # not claimed: nothing to judge
    assert claim_not_applicable({"pipeline": job.pipeline_metrics_base([])}, [PIPELINE_CLAIM], policy) == {}


def test_every_kind_golden_puts_each_kind_in_its_own_partition():
    g = golden.pipeline_every_kind()
    # The two transaction-fault kinds have goldens of their own (tests/golden_pipeline.py).
    assert set(g.counts) == set(EOS_KINDS) - {"eos_late_write", "lso_stall"} | {"eos_dirty_read"}
    assert set(golden.GOLDENS["pipeline_delayed_produce"]().counts) == {"eos_late_write", "eos_duplicated"}
    assert set(golden.GOLDENS["pipeline_hanging"]().counts) == {"lso_stall", "hanging_transaction"}
    assert {r["outcome"] for r in g.rows["transactions"]} <= set(TXN_OUTCOMES)
    by_value = {r["value_id"]: r["partition"] for r in g.rows["sends"]}
    parts = {k: {by_value[v] for v in vids} for k, vids in g.value_ids.items()}
    assert all(len(p) == 1 for p in parts.values()) and len({min(p) for p in parts.values()}) == len(parts)


def test_goldens_without_a_pipeline_write_no_pipeline_table(tmp_path):
    run = golden.clean().write(tmp_path / "clean")
    assert not any((run / f"{t}.parquet").exists() for t in PIPELINE_TABLES)
    run = golden.pipeline_clean().write(tmp_path / "pipeline")
    assert all((run / f"{t}.parquet").exists() for t in PIPELINE_TABLES)
    assert ledger.read_table(run, "transactions").num_rows == 6
