"""Several log directories per broker (issue 45.3): the layout, the refusals, the evidence and its judge."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkaproof.errors import ScenarioError
from kafkaproof.faults.families.log_dir import offline_lines
from kafkaproof.spec import jbod, scenario as scenario_mod
from kafkaproof.spec.cluster import ClusterConfig, cluster_config

from support import load_analysis_job

pytestmark = pytest.mark.unit

BASE = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}
FAILURE = [{"at": 1, "kind": "log_dir_failure", "target": "leader:0", "duration": 2}]


def test_several_log_directories_sit_under_data_beside_the_metadata_log():
    assert jbod.dir_properties(Path("/n/data"), 1) == {"log.dirs": "/n/data"}
    assert jbod.dir_properties(Path("/n/data"), 2) == {"log.dirs": "/n/data/log-0,/n/data/log-1",
                                                       "metadata.log.dir": "/n/data"}
    data = scenario_mod.validate_document({**BASE, "cluster": {"log_dirs": 2}, "faults": FAILURE}, "s.yaml")
    assert data["cluster"]["disk"] is True  # implied: the failure is a diskfs rule
    config = cluster_config(data, "t")
    assert config.log_dirs == 2 and ClusterConfig.from_layout("t", config.node_layout(), "4.3.1").log_dirs == 2
    assert "log_dirs" not in ClusterConfig().node_layout()  # older clusters' states stay as they were


@pytest.mark.parametrize("doc,field,words", [
    ({"faults": FAILURE}, "faults[0].kind", "set cluster.log_dirs to 2"),
    ({"cluster": {"log_dirs": 2, "kafka_version": "3.7.2"}}, "cluster.log_dirs", "no JBOD under KRaft"),
    ({"cluster": {"log_dirs": 2, "backend": "compose"}}, "cluster.log_dirs", "only the local backend"),
    ({"cluster": {"log_dirs": 9}}, "cluster.log_dirs", "9"),
])
def test_what_cannot_fail_a_log_directory_is_refused_naming_the_field(doc, field, words):
    with pytest.raises(ScenarioError) as e:
        scenario_mod.validate_document({**BASE, **doc}, "s.yaml")
    assert field in str(e.value) and words in str(e.value)


def test_the_evidence_is_the_brokers_own_log_line_and_its_judge_can_fail(tmp_path):
    log = tmp_path / "server.log"
    assert offline_lines(log, "/n/data/log-1") == 0
    log.write_text("[x] INFO [ReplicaManager broker=1] Stopped serving replicas in dir /n/data/log-1\n"
                   "[y] INFO Stopped serving replicas in dir /n/data/log-0\n")
    assert offline_lines(log, "/n/data/log-1") == 1
    job = load_analysis_job()

    def fault(after: int) -> dict:
        return {"kind": "log_dir_failure", "target": "leader:0", "fault_id": "f", "params": "{}",
                "effect": json.dumps({"log_dir": {"1": "/n/data/log-1"}, "offline_before": {"1": 0},
                                      "log_dir_offline": {"1": after}})}
    assert job.fault_effect(fault(1)) == (True, "node 1 took /n/data/log-1 offline")
    assert job.fault_effect(fault(0)) == (False, "node 1 did NOT take /n/data/log-1 offline")
