"""Ending a workload early: the reasons, the request file, and what a salvage refuses."""
from __future__ import annotations

import json

import pytest

from kafkaproof.errors import LedgerError
from kafkaproof.run.salvage import salvage_run
from kafkaproof.run.stopping import early_stop_reason, request_stop, stop_requested
from kafkaproof.spec import ledger

pytestmark = pytest.mark.unit


def test_a_request_comes_first_then_the_first_filesystem_below_the_floor():
    assert early_stop_reason(None, {"/runs": 5000.0, "/state": 9000.0}, 256) is None
    assert early_stop_reason("stopped by `kafkaproof stop`", {"/runs": 1.0}, 256) == "stopped by `kafkaproof stop`"
    assert early_stop_reason(None, {"/state": 100.0, "/runs": 200.0}, 256) == \
        "free disk below 256 MB (200 MB left at /runs)"
    assert early_stop_reason(None, {}, 256) is None


def test_a_stop_request_is_a_file_in_the_run_directory(tmp_path):
    assert stop_requested(tmp_path) is None
    request_stop(tmp_path, "the operator wants the host back")
    assert stop_requested(tmp_path) == "the operator wants the host back"
    (tmp_path / "STOP").write_text("not json")
    assert stop_requested(tmp_path) == "stop requested"


def test_salvage_refuses_a_complete_run_and_a_run_that_streamed_nothing(tmp_path):
    with pytest.raises(LedgerError, match="not a kafkaproof run directory"):
        salvage_run(tmp_path)
    ledger.write_manifest(tmp_path, {"status": "complete", "scenario": {}})
    with pytest.raises(LedgerError, match="the run is complete; there is nothing to salvage"):
        salvage_run(tmp_path)
    ledger.write_manifest(tmp_path, {"status": "running", "scenario": {}})
    with pytest.raises(LedgerError, match="no producer wrote anything"):
        salvage_run(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "running"
