"""Rolling upgrades and settings changes of real local clusters under load (docs/upgrades.md)."""
from __future__ import annotations

import pytest

from kafkaproof.pipeline import suite
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve

from rolling_checks import check_rolled_run, settings_change_upgrade_and_refused_downgrade

pytestmark = pytest.mark.cluster


def test_catalog_rolling_upgrade_3_9_to_4_3_under_load_loses_and_duplicates_nothing(tmp_path):
    (scenario,) = suite(names=["upgrade-39-to-43-idempotent"])
    result = ScenarioRun(resolve(scenario, Overrides(messages=20000)), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    check_rolled_run(result.run_dir, [1, 2, 3], 20000)


@pytest.mark.long
def test_settings_change_upgrade_and_a_refused_downgrade_with_a_dedicated_controller(make_cluster, tmp_path):
    cluster = make_cluster(brokers=1, controllers=1, kafka_version="3.9.2",
                           broker_config={"offsets.topic.replication.factor": 1,
                                          "transaction.state.log.replication.factor": 1,
                                          "transaction.state.log.min.isr": 1, "min.insync.replicas": 1})
    settings_change_upgrade_and_refused_downgrade(cluster, tmp_path)
