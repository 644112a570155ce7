"""Whether a kept cluster is as good as a fresh one: pure checks over what a survey found."""
from __future__ import annotations

import dataclasses

import pytest

from kafkaproof.cluster.isolation import Leftovers, isolation_problems, transient

pytestmark = pytest.mark.unit

CLEAN = Leftovers(node_states={1: "running", 2: "running", 3: "running"}, proxy_states={1: "running"},
                  brokers=[1, 2, 3], registered_brokers=[1, 2, 3], partitions=53,
                  active_groups={}, topic_exists=False, group_exists=False)


def test_a_clean_cluster_has_no_problem():
    assert isolation_problems(CLEAN, "kp-b", "kp-b") == []


@pytest.mark.parametrize("change, expected, settles", [
    ({"node_states": {1: "running", 2: "dead", 3: "running"}}, "node 2 is dead", False),
    ({"proxy_states": {1: "paused"}}, "the fault proxy of node 1 is paused", False),
    ({"recorded_faults": ["kill-1a2b3c4d"]}, "faults still recorded: kill-1a2b3c4d", False),
    ({"nft_tables": {2: ["kp_isolate_1"]}}, "node 2 still has nftables tables kp_isolate_1", False),
    ({"bandwidth_limited": [3]}, "a bandwidth limit is left on node 3", False),
    ({"proxy_rules": {1: ["latency-0a0b0c0d"]}}, "the fault proxy of node 1 still has rules latency-0a0b0c0d", False),
    ({"live_workers": ["consumer of r1 (pid 9)"]}, "workers of an earlier run still alive: consumer of r1 (pid 9)", False),
    ({"topic_exists": True}, "topic kp-b already exists", False),
    ({"group_exists": True}, "consumer group kp-b already exists", False),
    ({"registered_brokers": [1, 3]}, "brokers [2] are not registered", True),
    ({"not_in_sync": ["kp-a-0: leader 1, isr [1] of replicas [1, 2, 3]"]}, "1 partitions not fully in sync", True),
    ({"active_groups": {"kp-a": "PREPARING_REBALANCE"}}, "consumer group kp-a still has members", True),
    ({"metadata_error": "KafkaException: timed out"}, "metadata unreadable: KafkaException: timed out", True),
])
def test_each_leftover_is_named_and_only_a_settling_cluster_is_looked_at_again(change, expected, settles):
    left = dataclasses.replace(CLEAN, **change)
    problems = isolation_problems(left, "kp-b", "kp-b")
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    assert transient(left, "kp-b", "kp-b") is settles


def test_a_settling_cluster_with_a_lasting_leftover_is_not_looked_at_again():
    left = dataclasses.replace(CLEAN, not_in_sync=["kp-a-0: ..."], topic_exists=True)
    assert len(isolation_problems(left, "kp-b", "kp-b")) == 2 and not transient(left, "kp-b", "kp-b")


def test_leftovers_travel_as_json():
    assert CLEAN.to_json()["node_states"] == {"1": "running", "2": "running", "3": "running"}
