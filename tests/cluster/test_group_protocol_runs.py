"""The consumer group protocol (KIP-848) end to end on a real Kafka 4.3.1 cluster (issue 44, part 1; long).

Both drivers with `group.protocol=consumer` through a consumer kill, and the online migration (three classic
consumers restarted one at a time on the consumer protocol while the leader of partition 0 is killed): each
run complete, every acknowledged value read, the verdict the scenario claims (pass), and the manifest shows
which protocol each consumer incarnation ran and what the coordinator said of the group.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkaproof import analysis
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load
from kafkaproof.verdict.validation import validate

from support import needs_root

pytestmark = [pytest.mark.long, pytest.mark.cluster, needs_root, pytest.mark.timeout(1800)]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _run(name: str, out: Path, client: str | None = None):
    started = time.monotonic()
    result = ScenarioRun(resolve(load(SCENARIOS / f"{name}.yaml"), Overrides(client=client)),
                         RunOptions(out=out)).execute()
    print(f"[group-protocol] {name} ({client or 'librdkafka'}): {result.status} in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    assert result.status == "complete", result.error
    return result


def _every_acked_value_read(run_dir: Path) -> None:
    sends = ledger.read_table(run_dir, "sends").to_pandas()
    acked = set(sends.loc[sends["outcome"] == "ok", "value_id"])
    reads = set(ledger.read_table(run_dir, "reads").to_pandas()["value_id"])
    assert acked and acked <= reads, f"{len(acked - reads)} acknowledged values never read"


def test_consumer_protocol_on_both_drivers_and_the_online_migration_pass(tmp_path):
    runs = {("kafka4-consumer-consumer-kill", "librdkafka"): _run("kafka4-consumer-consumer-kill", tmp_path),
            ("kafka4-consumer-consumer-kill", "java"): _run("kafka4-consumer-consumer-kill", tmp_path, "java"),
            ("kafka4-online-migration", "librdkafka"): _run("kafka4-online-migration", tmp_path)}
    for (name, client), result in runs.items():
        _every_acked_value_read(result.run_dir)
        manifest = ledger.read_manifest(result.run_dir)
        group = manifest["consumer_group"]
        assert group.get("type") == "consumer", group  # the coordinator runs the group on the new protocol
        assert sorted(m["consumer"] for m in group["members"]) == [0, 1, 2], group
        started = manifest["consumer_protocols"]
        if name == "kafka4-online-migration":
            for i in range(3):  # each consumer: classic first, then the consumer protocol after its restart
                mine = [s["group_protocol"] for s in started if s["consumer"] == i]
                assert mine == ["classic", "consumer"], started
        else:
            assert {s["group_protocol"] for s in started} == {"consumer"}
            assert len([s for s in started if s["consumer"] == 1]) == 2  # killed and started again
    analysis.analyze_many([r.run_dir for r in runs.values()], quiet=True)
    for key, result in runs.items():
        v = validate(result.run_dir, data_docs=False)
        assert v.status == "pass", (key, v.status, [(r.anomaly, r.count) for r in v.rows if r.count])
