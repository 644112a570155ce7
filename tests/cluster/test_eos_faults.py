"""Faults aimed at transactions (issue 43) on a real cluster.

- The coordinator targets resolve to the brokers Kafka's FindCoordinator names: `group_coordinator` to the
  coordinator `DescribeGroups` reports (librdkafka asks FindCoordinator first), `txn_coordinator:<i>` to the
  `CoordinatorId` of `kafka-transactions describe` (TransactionsCommand: FindCoordinator with key type
  TRANSACTION), for several keys on one cluster.
- The `eos` catalog scenarios built on them and the Java copier get their claimed verdicts end to end (one
  Spark submit): the transaction coordinator killed, the group coordinator killed, the Java copier under a
  leader kill; with exact counts from the pipeline ledger.
"""
from __future__ import annotations

import collections
import re
import subprocess

import pytest

from kafkaproof import analysis
from kafkaproof.cluster import install
from kafkaproof.faults.injector import FaultInjector
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load
from kafkaproof.verdict.validation import format_result, validate

from support import REPO, needs_root

pytestmark = [pytest.mark.cluster, pytest.mark.long, needs_root]

TXN_IDS = ("kp-coord-a", "kp-coord-b", "kp-coord-c", "kp-coord-d")
GROUPS = ("kp-coord-g1", "kp-coord-g2", "kp-coord-g3")


def txn_coordinator(cluster, transactional_id: str) -> int:
    """The CoordinatorId Kafka's TransactionsCommand reports for `transactional_id` (FindCoordinator)."""
    dist = install.ensure_kafka(cluster.node_version(cluster.broker_ids()[0]))
    out = subprocess.run([install.java_binary(), "-cp", f"{dist.libs}/*", "org.apache.kafka.tools.TransactionsCommand",
                          "--bootstrap-server", cluster.bootstrap_servers(), "describe", "--transactional-id",
                          transactional_id], capture_output=True, text=True, timeout=120, check=True).stdout
    head, row = [re.split(r"\s{2,}|\t", line.strip()) for line in out.strip().splitlines()[:2]]
    return int(dict(zip(head, row))["CoordinatorId"])


@pytest.mark.timeout(300)
def test_coordinator_targets_are_the_brokers_find_coordinator_names(make_cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.bootstrap_servers()
    for tid in TXN_IDS:  # InitProducerId makes the transaction state (and __transaction_state itself)
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        p.init_transactions(60)
        p.flush(5)
    cluster.create_topic("coord-in", 1, 3)
    for g in GROUPS:  # a committed offset makes the group (and __consumer_offsets)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("coord-in", 0, 0)], asynchronous=False)
        c.close()
    cluster.wait_in_sync("__transaction_state")
    cluster.wait_in_sync("__consumer_offsets")
    got, want = {}, {}
    for tid in TXN_IDS:
        injector = FaultInjector(cluster, coordinator_keys={"pipeline": (tid,)})
        got[tid], want[tid] = injector.resolve("txn_coordinator:0"), [txn_coordinator(cluster, tid)]
    described = cluster.admin().describe_consumer_groups(list(GROUPS))
    for g in GROUPS:
        injector = FaultInjector(cluster, coordinator_keys={"consumers": g})
        got[g], want[g] = injector.resolve("group_coordinator"), [described[g].result(timeout=30).coordinator.id]
    print(f"coordinators: {got}")
    assert got == want
    assert len({v[0] for v in got.values()}) > 1, "keys spread over brokers (else the check proves little)"


SCENARIOS = ("eos-txn-coordinator-kill", "eos-group-coordinator-kill", "eos-copier-java-leader-kill")


def rows(run_dir, name: str) -> list[dict]:
    return ledger.read_table(run_dir, name).to_pylist()


@pytest.mark.java
@pytest.mark.timeout(900)
def test_the_eos_fault_scenarios_get_their_claimed_verdicts(tmp_path):
    results = {}
    for name in SCENARIOS:
        result = ScenarioRun(resolve(load(REPO / "scenarios" / f"{name}.yaml")), RunOptions(out=tmp_path)).execute()
        assert result.status == "complete", f"{name}: {result.error}"
        results[name] = result.run_dir
    analysis.analyze_many(list(results.values()), quiet=True)
    problems = []
    for name, d in results.items():
        v = validate(d, data_docs=False)
        acked = {r["value_id"] for r in rows(d, "sends") if r["outcome"] == "ok"}
        committed = collections.Counter(r["value_id"] for r in rows(d, "output_audit") if r["committed"])
        outcomes = collections.Counter(t["outcome"] for t in rows(d, "transactions"))
        (fault,) = [f for f in rows(d, "faults")]
        incarnations = {(t["copier"], t["txn"] >> 24 & 0xFFFF) for t in rows(d, "transactions")}
        print(f"{name}: {v.status}; {len(acked)} acked, {len(committed)} committed once "
              f"({sum(committed.values())} outputs), transactions {dict(outcomes)}, fault on {fault['target']} -> "
              f"nodes {fault['nodes']}, copier incarnations {sorted(incarnations)}")
        if v.status != "pass":
            problems.append(f"{name}: {format_result(v)}")
        assert set(committed) == acked and set(committed.values()) == {1}, name  # every input exactly once
        assert fault["kind"] == "kill" and fault["nodes"], name
    manifest = ledger.read_manifest(results["eos-copier-java-leader-kill"])
    assert {p["client"] for p in manifest["clients"]["consumers"]} == {"java"}
    assert list((results["eos-copier-java-leader-kill"] / "work").glob("copier-*.txns.tsv"))
    assert not problems, "\n".join(problems)
