"""Two checkouts on one host: two state directories (KAFKAPROOF_STATE), each with a cluster of the same
name, started at once. Their slots (subnets, namespaces, ports) differ, and `cluster down --all` in one
leaves the other's cluster running and reachable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaproof.cluster import network, process

pytestmark = pytest.mark.cluster


def kafkaproof(state: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaproof", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "KAFKAPROOF_STATE": str(state)})


def start(state: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kafkaproof", "cluster", "up", "--brokers", "1", "--heap", "256m"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "KAFKAPROOF_STATE": str(state)})


def metadata_ok(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient
    try:
        return len(AdminClient({"bootstrap.servers": bootstrap, "log_level": 2}).list_topics(timeout=10).brokers) == 1
    except Exception:
        return False


def test_down_all_in_one_state_directory_leaves_the_others_cluster_running(tmp_path):
    a, b = tmp_path / "checkout-a", tmp_path / "checkout-b"
    starts = {a: start(a), b: start(b)}  # at once: both pick their slot in the same moment
    try:
        for state, proc in starts.items():
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, out[-3000:]
        st = {s: json.loads((s / "clusters" / "default" / "state.json").read_text()) for s in (a, b)}
        assert st[a]["slot"] != st[b]["slot"]
        (node_a,), (node_b,) = st[a]["nodes"], st[b]["nodes"]
        assert (node_a["host"], node_a["client_port"]) != (node_b["host"], node_b["client_port"])
        bootstrap_b = f"{node_b['host']}:{node_b['client_port']}"
        assert metadata_ok(bootstrap_b)

        r = kafkaproof(a, "cluster", "down", "--all")
        assert r.returncode == 0 and "default" in r.stdout, r.stdout + r.stderr
        assert process.state_of(process.ProcessRef.from_json(node_a["process"])) == "dead"
        assert process.state_of(process.ProcessRef.from_json(node_b["process"])) == "running"
        if st[b]["network"] == "netns":
            namespaces = network.list_kafkaproof_namespaces()
            assert node_b["link"]["namespace"] in namespaces and node_a["link"]["namespace"] not in namespaces
        assert metadata_ok(bootstrap_b), "checkout b's cluster no longer answers after down --all in checkout a"
        status = json.loads(kafkaproof(b, "cluster", "status", "--json").stdout)
        assert [n["state"] for n in status["nodes"]] == ["running"]
    finally:
        for state in (a, b):
            kafkaproof(state, "cluster", "down", "--all")
    assert process.state_of(process.ProcessRef.from_json(node_b["process"])) == "dead"
