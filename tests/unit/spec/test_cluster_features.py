"""Format-time feature levels (issue 44.2): `cluster.features`, its spelling `cluster.elr`, and the refusals."""
from __future__ import annotations

import pytest

from kafkaproof.errors import ClusterError, ScenarioError
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import cluster_features, scenario as scenario_mod
from kafkaproof.spec.cluster import ClusterConfig, cluster_config
from kafkaproof.spec.scenario import Scenario

pytestmark = pytest.mark.unit

BASE = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}
ELR = cluster_features.ELR_FEATURE
ROLL = [{"at": 1, "kind": "rolling_upgrade", "target": "all", "params": {"version": "4.3.1"}}]


def _validate(cluster: dict, **more) -> dict:
    return scenario_mod.validate_document({**BASE, "cluster": cluster, **more}, "s.yaml")


def test_elr_is_a_spelling_of_the_feature_map_and_reaches_the_format():
    data = _validate({"kafka_version": "4.3.1", "elr": False, "features": {"transaction.version": 1}})
    assert "elr" not in data["cluster"]  # folded: one map from here on
    assert data["cluster"]["features"] == {ELR: 0, "transaction.version": 1}
    config = cluster_config(data, "t")
    assert config.features == {ELR: 0, "transaction.version": 1}
    assert cluster_features.format_args(config.features, "4.3.1") == [
        "--feature", f"{ELR}=0", "--feature", "transaction.version=1"]
    # the state file keeps them (a reused or re-attached cluster is known by them); none: as before
    assert ClusterConfig.from_layout("t", config.node_layout(), "4.3.1").features == config.features
    assert "features" not in ClusterConfig().node_layout()
    again = _validate({"kafka_version": "4.3.1", "features": {ELR: 0, "transaction.version": 1}})
    assert Scenario("t", "s.yaml", data).hash() == Scenario("t", "s.yaml", again).hash()


def test_clusters_with_other_levels_are_not_shared():
    from kafkaproof.cluster.reuse import config_key
    on, off = (cluster_config(_validate({"kafka_version": "4.3.1", "elr": elr}), "t") for elr in (True, False))
    assert config_key(on) != config_key(off)


def test_without_features_nothing_changes():
    data = _validate({"kafka_version": "4.3.1"})
    assert "features" not in data["cluster"] and cluster_config(data, "t").features == {}


def test_elr_off_on_a_release_without_the_feature_is_what_it_runs_and_is_not_formatted():
    data = _validate({"kafka_version": "3.9.2", "elr": False})
    assert data["cluster"]["features"] == {ELR: 0}
    assert cluster_features.format_args({ELR: 0}, "3.9.2") == []


@pytest.mark.parametrize("cluster,faults,field,words", [
    ({"kafka_version": "3.9.2", "elr": True}, [], "cluster.elr",
     "Kafka 3.9.2 has no feature 'eligible.leader.replicas.version'; it supports: transaction.version 0-0"),
    ({"kafka_version": "4.3.1", "features": {"group.version": 2}}, [], "cluster.features.group.version",
     "Kafka 4.3.1 supports group.version levels 0-1, not 2; it supports: eligible.leader.replicas.version 0-1"),
    ({"kafka_version": "4.3.1", "features": {"bogus.version": 1}}, [], "cluster.features.bogus.version",
     "has no feature 'bogus.version'"),
    ({"kafka_version": "4.3.1", "features": {"metadata.version": 30}}, [], "cluster.features.metadata.version",
     "cluster.kafka_version"),
    ({"kafka_version": "3.8.1", "features": {"transaction.version": 1}}, [], "cluster.features.transaction.version",
     "does not know the feature levels of Kafka 3.8.1"),
    ({"kafka_version": "4.3.1", "elr": True, "features": {ELR: 0}}, [], "cluster.elr", "contradicts"),
    ({"kafka_version": "4.3.1", "elr": True, "backend": "compose"}, [], "cluster.elr", "only the local backend"),
    ({"kafka_version": "3.9.2", "elr": False}, ROLL, "cluster.elr",
     "the rolling_upgrade to 4.3.1 finalises release 4.3's feature levels, which set "
     "eligible.leader.replicas.version to 1"),
])
def test_what_cannot_be_formatted_is_refused_naming_the_field_version_and_support(cluster, faults, field, words):
    with pytest.raises(ScenarioError) as e:
        _validate(cluster, faults=faults)
    assert f"s.yaml: {field}:" in str(e.value) and words in str(e.value)


def test_a_roll_without_finalize_keeps_the_pinned_level():
    roll = [{**ROLL[0], "params": {"version": "4.3.1", "finalize": False}}]
    assert _validate({"kafka_version": "3.9.2", "elr": False}, faults=roll)["cluster"]["features"] == {ELR: 0}


def test_an_attached_project_or_existing_cluster_keeps_its_levels(tmp_path):
    with pytest.raises(ScenarioError, match="cluster.elr: .*formats only the clusters it starts"):
        _validate({"kafka_version": "4.3.1", "elr": True, "attach": "shop", "backend": "compose"})
    scenario = Scenario("t", "s.yaml", _validate({"kafka_version": "4.3.1", "elr": False}))
    with pytest.raises(ScenarioError, match="cluster.features: .*keeps the levels it has"):
        resolve(scenario, Overrides(bootstrap="localhost:9092"))


def test_the_cluster_config_refuses_levels_on_its_own():
    with pytest.raises(ClusterError, match="features: only the local backend"):
        ClusterConfig(backend="compose", features={ELR: 1}).validate()
    with pytest.raises(ClusterError, match="features.share.version: .*levels 0-1, not 5"):
        ClusterConfig(kafka_version="4.3.1", features={"share.version": 5}).validate()
    ClusterConfig(kafka_version="4.3.1", features={ELR: 1}).validate()
