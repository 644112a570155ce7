"""Share groups (KIP-932) under faults on a real Kafka 4.3.1 cluster (issue 46 item 3; long).

1. The `share_coordinator` target: for 20 group ids, the broker kafkaproof resolves (the leader of the group's
   `__consumer_offsets` partition, Java's hash) is the one the brokers themselves name in FindCoordinator with key
   type GROUP (key type SHARE would name the share-*state* coordinator instead).
2. The three fault scenarios of the `share` catalog end to end with the verdict each claims (pass): the leader of
   partition 0 killed, the share group's coordinator killed, ShareAcknowledge answers lost (their records
   `unconfirmed`, counted).
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from kio.static.primitive import i8

from kafkaproof import analysis
from kafkaproof.cluster import ClusterConfig, LocalCluster
from kafkaproof.cluster.coordinators import find_coordinator
from kafkaproof.proxy import protocol as kp
from kafkaproof.proxy.fake_broker import RawClient
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.coordinator_targets import COORDINATOR_TARGETS
from kafkaproof.spec.scenario import load
from kafkaproof.verdict.validation import validate

from support import needs_root

pytestmark = [pytest.mark.long, pytest.mark.cluster, needs_root]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
GROUPS = [f"kp-share-g{i}" for i in range(20)]


async def _find_coordinators(address: str, keys: list[str], deadline: float) -> dict[str, int]:
    """FindCoordinator v4 (key type GROUP) for `keys`, asked again until every key has an answer without error
    (the first request creates `__consumer_offsets`); key -> node id."""
    cls = kp.request_type(kp.FIND_COORDINATOR, 4)
    client = await RawClient().connect(address)
    try:
        corr = 0
        while True:
            corr += 1
            await client.send(kp.make_entity(cls, key_type=i8(0), coordinator_keys=tuple(keys)), corr)
            _, answer = await client.recv(kp.FIND_COORDINATOR, 4)
            found = {c.key: int(c.node_id) for c in answer.coordinators if int(c.error_code) == 0}
            if len(found) == len(keys) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.5)
    finally:
        await client.close()


@pytest.mark.timeout(240)
def test_share_coordinator_is_the_broker_findcoordinator_names():
    cluster = LocalCluster.up(ClusterConfig(name=f"shc-{uuid.uuid4().hex[:6]}", brokers=3))
    try:
        address = cluster.direct_bootstrap().split(",")[0]
        named = asyncio.run(_find_coordinators(address, GROUPS, time.monotonic() + 60))
        assert len(named) == len(GROUPS), named
        deadline = time.monotonic() + 30  # every __consumer_offsets partition led before comparing
        while any(p["leader"] < 0 for p in cluster.partitions("__consumer_offsets").values()):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        kind = COORDINATOR_TARGETS["share_coordinator"]
        ours = {g: find_coordinator(cluster, kind, g).node for g in GROUPS}
        print(f"[share-coordinator] {len(GROUPS)} groups on nodes "
              f"{sorted(set(ours.values()))}: {sum(ours[g] == named[g] for g in GROUPS)} agree", file=sys.stderr)
        assert ours == named
    finally:
        cluster.down(keep_logs=False)


def _run(name: str, out: Path):
    started = time.monotonic()
    result = ScenarioRun(resolve(load(SCENARIOS / f"{name}.yaml")), RunOptions(out=out)).execute()
    print(f"[share-faults] {name}: {result.status} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    assert result.status == "complete", result.error
    return result


def _faults(run_dir: Path) -> list[dict]:
    return ledger.read_table(run_dir, "faults").to_pylist()


@pytest.mark.timeout(900)
def test_the_share_fault_scenarios_get_their_claimed_verdicts(tmp_path):
    names = ("share-leader-killed", "share-coordinator-killed", "share-lost-acknowledge-answers")
    runs = {name: _run(name, tmp_path) for name in names}
    analysis.analyze_many([r.run_dir for r in runs.values()], quiet=True)
    for name, result in runs.items():
        metrics = json.loads((result.run_dir / "analysis" / "metrics.json").read_text())
        share = metrics["share"]
        v = validate(result.run_dir, data_docs=False)
        print(f"[share-faults] {name}: {v.status}; outcomes {share['outcomes']}, {share['redeliveries']} "
              f"redeliveries ({share['failover_redeliveries']} across a leader change), acks {share['acks']}",
              file=sys.stderr)
        assert v.status == "pass", (name, v.status, v.errors, [(r.anomaly, r.count) for r in v.rows if r.count])
        outcomes = share["outcomes"]
        assert outcomes["accepted"] > 0 and outcomes["never_delivered"] == outcomes["not_returned"] == 0
    (kill,) = _faults(runs["share-coordinator-killed"].run_dir)
    coordinator = json.loads(kill["params"])["coordinator"]
    assert coordinator["key"] == "kp-share-share-coordinator-killed" and kill["nodes"] == [coordinator["node"]]
    lost = json.loads((runs["share-lost-acknowledge-answers"].run_dir / "analysis" / "metrics.json").read_text())
    dropped = [e for e in ledger.read_table(runs["share-lost-acknowledge-answers"].run_dir, "proxy_events").to_pylist()
               if e["phase"] == "response_dropped"]
    assert [e["api"] for e in dropped] == ["share_acknowledge"] * 2
    assert lost["share"]["outcomes"]["unconfirmed"] >= 1
