"""The share-group checks' pure parts (issue 46): applicability, the group's settings, the claim's verdict rows."""
from __future__ import annotations

import pytest

import golden  # noqa: F401 - registers the share goldens (golden_share builds on it)
from golden_share import SHARE_KINDS
from kafkaproof.spec import share_ledger
from kafkaproof.verdict.policy import load_policy
from kafkaproof.verdict.validation import claim_not_applicable
from support import load_analysis_job

pytestmark = pytest.mark.unit
job = load_analysis_job()  # puts spark/ on the path


def _share():
    import kafkaproof_analysis.share as mod
    return mod


def test_the_tables_and_defaults_agree_with_the_ledger():
    mod = _share()
    assert mod.SHARE_TABLES == tuple(share_ledger.SHARE_TABLES)
    assert (mod.DEFAULT_DELIVERY_LIMIT, mod.DEFAULT_LOCK_TIMEOUT_MS) == (
        share_ledger.DEFAULT_DELIVERY_LIMIT, share_ledger.DEFAULT_LOCK_TIMEOUT_MS)
    assert mod.SHARE_KINDS == SHARE_KINDS and set(SHARE_KINDS) <= set(job.KINDS)
    assert set(load_policy().forbidden_by_claim["share_group"]) == set(SHARE_KINDS)


def test_applicability_and_settings():
    mod = _share()
    assert mod.missing_share_tables({t: True for t in share_ledger.SHARE_TABLES}) == []
    assert mod.missing_share_tables({"share_acks": True}) == ["share_deliveries", "share_members"]
    assert mod.share_settings({}) == (5, 30_000)
    assert mod.share_settings({"scenario": {"share": {"delivery_limit": 2, "lock_timeout_ms": 500}}}) == (2, 500)
    base = mod.share_metrics_base(["share_acks"], {})
    assert base["applicable"] is False and base["reason"] == "no share ledger (share_acks.parquet missing)"


def test_the_claim_is_not_applicable_without_the_share_ledger_and_judged_with_it():
    policy = load_policy()
    why = claim_not_applicable({"share": {"applicable": False, "reason": "no share ledger (x)"}},
                               ["share_group"], policy)
    assert set(why) == set(SHARE_KINDS) and all(w == "claim share_group: no share ledger (x)" for w in why.values())
    assert claim_not_applicable({"share": {"applicable": True}}, ["share_group"], policy) == {}
    assert claim_not_applicable({}, [], policy) == {}
    assert "analysed before" in claim_not_applicable({}, ["share_group"], policy)["share_past_limit"]
