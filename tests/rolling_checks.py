"""Checks of rolling faults shared by the local and the compose cluster tests (imported as `rolling_checks`)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafkaproof.errors import FaultError
from kafkaproof.faults import FaultInjector
from kafkaproof.spec import ledger
from kafkaproof.spec.faults import FaultSpec

from support import produce


def settings_change_upgrade_and_refused_downgrade(cluster, tmp_path: Path, topic: str = "rolled") -> None:
    """On a cluster started on 3.9.2: a rolling settings change, a finalised upgrade to 4.3.1 and a
    downgrade to 3.9.2 that Kafka refuses; the refused node is put back on 4.3.1, and data written
    before the roll is still readable after it."""
    rf = min(2, len(cluster.broker_ids()))
    cluster.create_topic(topic, partitions=2, replication_factor=rf)
    assert produce(cluster.direct_bootstrap(), topic, 300)[0] == 300
    fault_log = tmp_path / "faults.jsonl"
    with FaultInjector(cluster, topic=topic, log_path=fault_log) as inj:
        inj.inject(FaultSpec("rolling_restart", "", {"config": {"num.replica.fetchers": 2}}))
        assert all(cluster.node_settings(n) == {"num.replica.fetchers": 2} for n in cluster.node_ids())
        assert set(cluster.node_versions().values()) == {"3.9.2"}

        inj.inject(FaultSpec("rolling_upgrade", "", {"version": "4.3.1"}))
        assert set(cluster.node_versions().values()) == {"4.3.1"}
        assert all(cluster.node_settings(n) == {"num.replica.fetchers": 2} for n in cluster.node_ids()), \
            "an upgrade keeps the settings an earlier roll gave"

        with pytest.raises(FaultError) as refused:
            inj.inject(FaultSpec("rolling_upgrade", "", {"version": "3.9.2"}))
    message = str(refused.value)
    assert "Encountered fatal fault" in message and "it was put back on Kafka 4.3.1" in message, message
    assert set(cluster.node_versions().values()) == {"4.3.1"}
    assert all(cluster.node_state(n) == "running" for n in cluster.node_ids())
    assert not cluster.active_faults()
    assert produce(cluster.direct_bootstrap(), topic, 100)[0] == 100

    events = [json.loads(line) for line in fault_log.read_text().splitlines()]
    kinds = [(e["event"], e["kind"]) for e in events]
    assert kinds.count(("inject", "roll_node")) == kinds.count(("heal", "roll_node")) == 3 * len(cluster.node_ids()) - (
        len(cluster.node_ids()) - 1), "every node twice, and the refused one once more"
    finalized = [e for e in events if e["event"] == "heal" and e["kind"] == "finalize_features"]
    assert len(finalized) == 1 and finalized[0]["step"]["levels"]["metadata.version"] >= 30


def check_rolled_run(run_dir: Path, nodes: list[int], messages: int) -> None:
    """A catalog upgrade scenario's run: every value acked and in the log once, a step per node, the
    features finalised, and the snapshots showing each node's version change."""
    table = lambda name: pq.read_table(ledger.table_path(run_dir, name)).to_pandas()  # noqa: E731
    sends, audit, faults, snaps = (table(n) for n in ("sends", "audit", "faults", "cluster_snapshots"))
    assert len(sends) == messages and set(sends["outcome"]) == {"ok"}
    log = audit[audit["isolation"] == "read_uncommitted"]
    assert len(log) == messages and log["value_id"].is_unique and set(log["value_id"]) == set(sends["value_id"])
    steps = faults[faults["kind"] == "roll_node"].sort_values("start_ns")
    assert sorted(n for ns in steps["nodes"] for n in ns) == sorted(nodes)
    for effect in steps["effect"]:
        step = json.loads(effect)["step"]
        assert (step["version_before"], step["version_after"]) == ("3.9.2", "4.3.1") and step["caught_up_s"] < 60 and step["out_s"] >= step["caught_up_s"]
    assert (faults["kind"] == "finalize_features").sum() == 1
    versions = [json.loads(v) for v in snaps.sort_values("ts_ns")["node_versions"]]
    assert set(versions[0].values()) == {"3.9.2"} and set(versions[-1].values()) == {"4.3.1"}
    assert any(len(set(v.values())) == 2 for v in versions), "the mixed-version period is in the snapshots"
