"""Clock faults without a cluster: parameters, scenario checks, offset files, backends and the verdict."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from support import REPO, load_analysis_job

from kafkaproof.cluster import clock
from kafkaproof.cluster.compose import ComposeCluster, refusal as compose_refusal
from kafkaproof.errors import ClusterError, FaultError, ScenarioError
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.cluster import ClusterConfig, cluster_config
from kafkaproof.spec.faults import FaultSpec

job = load_analysis_job()
pytestmark = pytest.mark.unit


def test_offset_is_required_non_zero_and_bounded():
    FaultSpec("clock_skew", "leader:0", {"offset_s": 172800}).validate()
    FaultSpec("clock_skew", "all", {"offset_s": -0.5}).validate()
    with pytest.raises(FaultError, match="fault.params.offset_s: required for clock_skew"):
        FaultSpec("clock_skew", "all").validate()
    with pytest.raises(FaultError, match="fault.params.offset_s: must be non-zero"):
        FaultSpec("clock_skew", "all", {"offset_s": 0}).validate()
    with pytest.raises(FaultError, match="ten years"):
        FaultSpec("clock_skew", "all", {"offset_s": 4e8}).validate()


def _scenario(tmp_path, **cluster):
    doc = {"name": "clocky", "guarantee": "at-least-once", "producers": {"messages": 100}, "cluster": {"brokers": 3, **cluster},
           "faults": [{"at": 2, "kind": "clock_skew", "target": "all", "params": {"offset_s": 3600}, "duration": 2}]}
    path = tmp_path / "clocky.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_clock_fault_implies_a_local_cluster_under_libfaketime(tmp_path):
    scn = scenario_mod.load(_scenario(tmp_path))
    assert scn.data["cluster"]["clock"] is True
    assert cluster_config(scn.data, "c").clock is True
    assert scenario_mod.load(REPO / "scenarios" / "baseline.yaml").data["cluster"].get("clock") is None  # hash kept
    with pytest.raises(ScenarioError, match="cluster.clock: false, but faults\\[0\\] \\(clock_skew\\) needs it"):
        scenario_mod.load(_scenario(tmp_path, clock=False))
    with pytest.raises(ScenarioError, match="cluster.backend: compose: faults\\[0\\] \\(clock_skew\\) needs the local"):
        scenario_mod.load(_scenario(tmp_path, backend="compose"))
    with pytest.raises(ClusterError, match="only the local backend"):
        ClusterConfig(backend="compose", clock=True).validate()


def test_offset_files_and_the_environment_a_node_starts_with(tmp_path, monkeypatch):
    fake_lib = tmp_path / "libfaketimeMT.so.1"
    monkeypatch.setattr(clock, "LIBFAKETIME", fake_lib)
    with pytest.raises(ClusterError, match="install Debian's faketime package"):
        clock.faketime_env(tmp_path)
    fake_lib.write_text("")
    env = clock.faketime_env(tmp_path)
    assert env["LD_PRELOAD"] == str(fake_lib) and env["FAKETIME_DONT_FAKE_MONOTONIC"] == "1"
    assert (tmp_path / "clock.rc").read_text() == "+0.000\n" and clock.read_offset(tmp_path) == 0
    clock.set_offset(tmp_path, -1.25)
    assert (tmp_path / "clock.rc").read_text() == "-1.250\n" and clock.read_offset(tmp_path) == -1.25
    assert clock.process_has_faketime(os.getpid()) is False


def test_compose_refuses_clock_faults_with_the_reason():
    assert "clock_skew" not in ComposeCluster.supported_for()
    assert "needs the local backend" in compose_refusal("clock_skew")


def _fault(params, effect):
    return {"fault_id": "clock_skew-1", "kind": "clock_skew", "target": "all", "params": json.dumps(params),
            "effect": json.dumps(effect)}


def test_a_clock_fault_took_effect_only_when_every_node_holds_the_offset_with_libfaketime_loaded():
    on = {"offset_s": 3600.0, "faketime_loaded": True}
    assert job.fault_effect(_fault({"offset_s": 3600}, {"clocks": {"1": on, "2": on}})) == (
        True, "node 1 clock +3600 s, node 2 clock +3600 s")
    not_loaded = {"offset_s": 3600.0, "faketime_loaded": False}
    assert job.fault_effect(_fault({"offset_s": 3600}, {"clocks": {"1": on, "2": not_loaded}})) == (
        False, "node 1 clock +3600 s, node 2 clock +3600 s (libfaketime not loaded)")
    assert job.fault_effect(_fault({"offset_s": 3600}, {"clocks": {"1": {"offset_s": 0.0, "faketime_loaded": True}}}))[0] is False
    assert job.fault_effect(_fault({"offset_s": 3600}, {})) == (False, "no node clock was recorded")
