"""The typed manifest: what every later step reads of a run, from old and new manifests alike."""
from __future__ import annotations

import pytest

from kafkaproof.errors import LedgerError
from kafkaproof.spec.ledger import write_manifest
from kafkaproof.spec.manifest import Manifest
from kafkaproof.spec.scenario import Scenario, validate_document

pytestmark = pytest.mark.unit


def test_properties_of_a_manifest(tmp_path):
    write_manifest(tmp_path, {
        "run_id": "r1", "status": "complete", "scenario_name": "s", "scenario_hash": "abc",
        "scenario": {"name": "s", "guarantee": "at-least-once", "expect": {"detect": ["lost"], "why": "truncation"}},
        "expect": {"outcome": "detect", "detect": ["lost"]}, "versions": {"kafka": "4.3.1", "librdkafka": "2.12.1"},
        "clock": {"monotonic_origin_ns": 5, "wall_origin_ns": 7}, "timings": {"workload": {"start_ns": 6}}})
    m = Manifest.read(tmp_path)
    assert (m.run_id, m.status, m.scenario_name, m.scenario_hash, m.guarantee) == ("r1", "complete", "s", "abc",
                                                                                    "at-least-once")
    assert m.expect == {"outcome": "detect", "detect": ["lost"]} and m.expect_why == "truncation"
    assert (m.kafka_version, m.client_version, m.t0_ns, m.wall_origin_ns) == ("4.3.1", "2.12.1", 5, 7)
    assert m.timings["workload"]["start_ns"] == 6 and m.clients == {} and m.fault_errors == []


def test_older_and_partial_manifests():
    m = Manifest({"scenario": {"name": "s", "expect": {"outcome": "pass", "detect": []}}})
    assert m.expect == {"outcome": "pass", "detect": []} and m.scenario_name == "s" and m.t0_ns is None
    assert Manifest({"scenario": {"expect": "pass"}}).expect_outcome == "pass"
    assert Manifest({}).expect == {"outcome": "pass", "detect": []}
    with pytest.raises(LedgerError, match="no manifest"):
        Manifest.read(__import__("pathlib").Path("/nonexistent-run"))


def test_a_resolved_scenario_travels_as_json():
    data = validate_document({"name": "t", "guarantee": "at-least-once", "producers": {"messages": 5}}, "t.yaml")
    scn = Scenario("t", "t.yaml", data)
    back = Scenario.from_json(scn.to_json())
    assert back == scn and back.hash() == scn.hash()
