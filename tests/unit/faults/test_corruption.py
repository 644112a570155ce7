"""Corruption at rest (`file_corrupt`) without a cluster: parameters, the majority rule (scenario and injection),
which files of a log directory each kind chooses, what a bit flip or a truncation changes, the handler's recipe
and evidence, the backends that refuse it, and the verdict's judge."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from support import load_analysis_job

from kafkaproof.cluster.attached import AttachedCluster
from kafkaproof.cluster.compose import ComposeCluster, refusal as compose_refusal
from kafkaproof.cluster.corrupt import bitflip, choose_files, corrupt_files, truncate
from kafkaproof.errors import FaultError, ScenarioError
from kafkaproof.faults import FaultInjector, check_fault
from kafkaproof.faults.families import handler_for
from kafkaproof.faults.families import corruption as corruption_mod
from kafkaproof.faults.families.corruption import refusal_line, target_partition
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.corruption import scenario_majority_problem
from kafkaproof.spec.faults import CORRUPTION_KINDS, FAULT_KINDS, FaultSpec

job = load_analysis_job()
pytestmark = pytest.mark.unit

SEGMENT = {"file": "segment", "mode": "bitflip"}


def test_parameters_are_checked_before_anything_starts():
    assert CORRUPTION_KINDS == ("file_corrupt",) and "file_corrupt" in FAULT_KINDS
    check_fault(FaultSpec("file_corrupt", "follower:0", {**SEGMENT, "segment": "closed", "probability": 0.5,
                                                         "range_bytes": 512, "seed": 7, "partition": "orders:2"}))
    check_fault(FaultSpec("file_corrupt", "leader:0", {"file": "segment", "mode": "truncate", "fraction": 0.25,
                                                       "when": "stopped", "segment": "active"}))
    cases = [({"file": "wal", "mode": "bitflip"}, r"fault.params.file: 'wal' is not allowed; allowed: segment, index, "
                                                  r"checkpoint, snapshot"),
             ({"file": "segment", "mode": "zero"}, "fault.params.mode: 'zero' is not allowed; allowed: bitflip, truncate"),
             ({"file": "segment"}, "fault.params.mode: required for file_corrupt"),
             ({**SEGMENT, "segment": "old"}, "fault.params.segment: 'old' is not allowed; allowed: active, closed, all"),
             ({"file": "checkpoint", "mode": "bitflip", "segment": "active"}, "fault.params.segment: only for file"),
             ({**SEGMENT, "when": "later"}, "fault.params.when: 'later' is not allowed"),
             ({**SEGMENT, "probability": 0}, r"fault.params.probability: must be in \(0, 1\]"),
             ({**SEGMENT, "range_bytes": 0}, "fault.params.range_bytes: must be >= 1"),
             ({"file": "segment", "mode": "truncate", "probability": 0.1}, "fault.params.probability: only for mode: bitflip"),
             ({**SEGMENT, "fraction": 0.5}, "fault.params.fraction: only for mode: truncate"),
             ({"file": "segment", "mode": "truncate", "fraction": 1}, r"fault.params.fraction: must be in \[0, 1\)"),
             ({**SEGMENT, "partition": "orders"}, "fault.params.partition: 'orders' is not a partition"),
             ({**SEGMENT, "allow_majority": "yes"}, "fault.params.allow_majority: expected bool"),
             ({"file": "checkpoint", "mode": "truncate", "checkpoint": "offsets"},
              "fault.params.checkpoint: 'offsets' is not allowed; allowed: leader-epoch, replication-offset, "
              "recovery-point, all"),
             ({**SEGMENT, "checkpoint": "leader-epoch"}, "fault.params.checkpoint: only for file: checkpoint"),
             ({"file": "snapshot", "mode": "bitflip", "metadata": "quorum"},
              "fault.params.metadata: 'quorum' is not allowed; allowed: snapshots, log, all"),
             ({"file": "checkpoint", "mode": "bitflip", "metadata": "log"}, "fault.params.metadata: only for file: "
                                                                             "snapshot")]
    for params, message in cases:
        with pytest.raises(FaultError, match=message):
            check_fault(FaultSpec("file_corrupt", "leader:0", params))


def test_a_majority_of_replicas_or_voters_is_refused_unless_allowed():
    def problem(target, brokers=3, controllers=0, rf=3, **params):
        return scenario_majority_problem({"target": target, "params": {**SEGMENT, **params}}, brokers, controllers, rf)
    assert problem("follower:0") is None and problem("leader:0") is None and problem("node:2") is None
    assert "damage 2 of 3 replicas of a partition: a majority" in problem("followers:0")
    assert "damage 2 of 3" in problem("nodes:1,2") and "3 of 3" in problem("all") and "3 of 3" in problem("brokers")
    assert problem("nodes:1,2", brokers=5) is None  # which replicas they hold is only known at injection
    assert problem("all", allow_majority=True) is None
    assert "1 of 1" in problem("leader:0", brokers=1, rf=1)
    assert problem("controller", controllers=3, file="snapshot") is None
    assert "3 of 3 KRaft voters" in problem("all", controllers=3, file="snapshot")
    assert problem("brokers", controllers=3, file="snapshot") is None  # dedicated controllers keep the snapshots
    assert "2 of 3 KRaft voters" in problem("nodes:101,102", controllers=3, file="snapshot")


def _scenario(tmp_path: Path, fault: dict, **cluster) -> Path:
    doc = {"name": "corrupt", "guarantee": "at-least-once", "producers": {"messages": 100},
           "cluster": {"brokers": 3, **cluster}, "topic": {"partitions": 1, "replication_factor": 3},
           "faults": [{"at": 2, "kind": "file_corrupt", **fault}]}
    path = tmp_path / "corrupt.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_scenario_names_the_field_of_a_majority_or_an_unknown_file_kind(tmp_path):
    ok = scenario_mod.load(_scenario(tmp_path, {"target": "follower:0", "params": SEGMENT}))
    assert ok.data["faults"][0]["kind"] == "file_corrupt"
    with pytest.raises(ScenarioError, match=r"faults\[0\].params.allow_majority: file_corrupt would damage 2 of 3"):
        scenario_mod.load(_scenario(tmp_path, {"target": "followers:0", "params": SEGMENT}))
    scenario_mod.load(_scenario(tmp_path, {"target": "followers:0", "params": {**SEGMENT, "allow_majority": True}}))
    with pytest.raises(ScenarioError, match=r"faults\[0\].params.file: 'journal' is not allowed"):
        scenario_mod.load(_scenario(tmp_path, {"target": "leader:0", "params": {"file": "journal", "mode": "bitflip"}}))


def test_compose_corrupts_its_volumes_only_with_the_engine_here_and_an_attached_project_never(tmp_path):
    import socket
    sock_path = tmp_path / "docker.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        here, elsewhere = f"unix://{sock_path}", "tcp://10.0.0.9:2376"
        assert set(CORRUPTION_KINDS) <= ComposeCluster.supported_for(here)
        assert not set(CORRUPTION_KINDS) & ComposeCluster.supported_for(elsewhere)
        assert compose_refusal("file_corrupt", here) is None
        assert "the Docker engine tcp://10.0.0.9:2376 runs on another machine (its volumes are there)" in \
            compose_refusal("file_corrupt", elsewhere)
        assert "needs the local backend" in compose_refusal("disk_full", here)
    finally:
        sock.close()
    assert not set(CORRUPTION_KINDS) & AttachedCluster.supported_for()


def test_a_compose_nodes_log_directory_is_its_data_volume_on_this_host(tmp_path, monkeypatch):
    import kafkaproof.cluster.compose as compose_mod
    from types import SimpleNamespace
    volume = tmp_path / "volumes" / "p_kafka1-data" / "_data"
    volume.mkdir(parents=True)
    mounts = [{"Type": "bind", "Source": "/etc/hosts", "Destination": "/etc/hosts"},
              {"Type": "volume", "Source": str(volume), "Destination": compose_mod.DATA_DIR}]
    monkeypatch.setattr(compose_mod.de, "container_mounts", lambda name: mounts)
    engine = {"url": "tcp://10.0.0.9:2376"}
    cluster = ComposeCluster.__new__(ComposeCluster)
    cluster.state = lambda: SimpleNamespace(engine=engine["url"])
    cluster.node = lambda n: SimpleNamespace(container=f"p-kafka{n}")
    with pytest.raises(FaultError, match="runs on another machine"):
        cluster.log_dir(1)
    monkeypatch.setattr(compose_mod, "corruption_refusal", lambda engine: None)
    assert cluster.log_dir(1) == volume
    mounts.pop()
    with pytest.raises(FaultError, match="container p-kafka1 mounts nothing at /var/lib/kafka/data"):
        cluster.log_dir(1)
    mounts.append({"Source": str(tmp_path / "in-a-vm"), "Destination": compose_mod.DATA_DIR})
    with pytest.raises(FaultError, match="is no directory of this host"):
        cluster.log_dir(1)


def log_dir(tmp_path: Path) -> Path:
    """A broker's log directory as Kafka lays it out: two partitions of `orders` with three segments each, the
    metadata log with a snapshot, the checkpoints."""
    d = tmp_path / "data"
    for p in (0, 1):
        pdir = d / f"orders-{p}"
        pdir.mkdir(parents=True)
        for base in (0, 120, 1000):  # numeric order, not the names' (all are 20 digits in Kafka)
            for suffix in (".log", ".index", ".timeindex"):
                (pdir / f"{base:020d}{suffix}").write_bytes(bytes(range(256)) * 40)
        (pdir / "00000000000000001000.snapshot").write_bytes(b"producer state")
        (pdir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (d / "__consumer_offsets-0").mkdir()
    (d / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(b"x" * 100)
    meta = d / "__cluster_metadata-0"
    meta.mkdir()
    (meta / "00000000000000000000.log").write_bytes(b"m" * 100)
    (meta / "00000000000000000050-0000000001.checkpoint").write_bytes(b"s" * 100)
    (meta / "quorum-state").write_text("{}")
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        (d / name).write_text("0\n1\norders 0 5\n")
    return d


def test_each_file_kind_chooses_its_files_of_the_chosen_partitions(tmp_path):
    d = log_dir(tmp_path)

    def names(*args, **kwargs):
        return [str(p.relative_to(d)) for p in choose_files(d, *args, **kwargs)]
    assert names("segment", "orders", 0, "active") == ["orders-0/00000000000000001000.log"]
    assert names("segment", "orders", 1, "closed") == ["orders-1/00000000000000000000.log",
                                                       "orders-1/00000000000000000120.log"]
    assert len(names("segment", "orders", None, "all")) == 6
    assert names("segment", None, None, "active") == ["orders-0/00000000000000001000.log",
                                                      "orders-1/00000000000000001000.log"]  # no internal topics
    assert names("index", "orders", 0, "active") == ["orders-0/00000000000000001000.index",
                                                     "orders-0/00000000000000001000.timeindex"]
    assert names("checkpoint", "orders", 1) == ["replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                                                "orders-1/leader-epoch-checkpoint"]
    assert names("snapshot") == ["__cluster_metadata-0/00000000000000000000.log",
                                 "__cluster_metadata-0/00000000000000000050-0000000001.checkpoint"]
    assert names("segment", "payments", None) == []
    assert names("checkpoint", "orders", 0, checkpoint="leader-epoch") == ["orders-0/leader-epoch-checkpoint"]
    assert names("checkpoint", "orders", None, checkpoint="replication-offset") == ["replication-offset-checkpoint"]
    assert names("checkpoint", "orders", 0, checkpoint="recovery-point") == ["recovery-point-offset-checkpoint"]
    assert names("snapshot", metadata="snapshots") == ["__cluster_metadata-0/00000000000000000050-0000000001.checkpoint"]
    assert names("snapshot", metadata="log") == ["__cluster_metadata-0/00000000000000000000.log"]


def test_a_bitflip_flips_one_bit_per_chosen_range_and_a_truncation_cuts_the_tail(tmp_path):
    path = tmp_path / "f"
    original = bytes(range(256)) * 64  # 16 KiB
    path.write_bytes(original)
    done = bitflip(path, 1.0, 4096, random.Random(3))
    after = path.read_bytes()
    diffs = [i for i, (a, b) in enumerate(zip(original, after)) if a != b]
    assert done["flipped"] == 4 and done["size"] == len(original) and sorted(done["offsets"]) == diffs
    assert all(bin(original[i] ^ after[i]).count("1") == 1 for i in diffs)
    assert [i // 4096 for i in diffs] == [0, 1, 2, 3]
    path.write_bytes(original)
    assert bitflip(path, 1.0, 4096, random.Random(3)) == done  # seeded: the same flips again
    path.write_bytes(original)
    assert bitflip(path, 0.000001, 4096, random.Random(3))["flipped"] == 0 and path.read_bytes() == original
    assert truncate(path, 0.25) == {"size": 16384, "cut": 12288} and path.stat().st_size == 4096
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert truncate(empty, 0.5) == {"size": 0, "cut": 0}
    out = corrupt_files(tmp_path, [path], "truncate", random.Random(0), fraction=0.5)
    assert out == [{"file": "f", "size": 4096, "cut": 2048}]


class FakeCluster:
    """What the corruption handler asks of a cluster: replicas, voters, node processes, log directories."""

    name = "fake"
    supported_faults = frozenset(FAULT_KINDS)

    def __init__(self, tmp_path: Path):
        self.dirs = {n: log_dir(tmp_path / f"node-{n}") for n in (1, 2, 3)}
        self.calls: list[tuple] = []
        self.faults: list[dict] = []

    def log_dir(self, n):
        return self.dirs[n]

    def partitions(self, topic):
        return {0: {"leader": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3]},
                1: {"leader": 2, "replicas": [2, 3, 1], "isr": [2, 3, 1]}}

    def controller_ids(self):
        return [1, 2, 3]

    def node_ids(self):
        return [1, 2, 3]

    def followers(self, topic, p):
        return [2, 3]

    def leader_of(self, topic, p):
        return 1

    def stop_node(self, n, graceful=True, timeout_s=30.0):
        self.calls.append(("stop", n, graceful))

    def start_node(self, n):
        self.calls.append(("start", n))

    def wait_node_listening(self, n, timeout_s=60):
        self.calls.append(("listening", n))

    refuses: dict[int, str] = {}  # node -> what its log says before it exits at a start
    hangs: set[int] = set()  # nodes that neither start nor exit

    def node_state(self, n):
        if n in self.refuses and ("start", n) in self.calls:
            return "dead"
        return "dead" if self.calls and self.calls[-1][0] == "stop" else "running"

    def node_log_since_start(self, n):
        if n in self.refuses:
            return self.refuses[n]
        return "" if n in self.hangs else "[KafkaRaftServer nodeId=1] Kafka Server started"

    def log_hint(self, n):
        return f"node-{n}/server.log"

    def record_fault(self, fault):
        self.faults.append(fault)

    def active_faults(self):
        return self.faults

    def forget_fault(self, fid):
        self.faults = [f for f in self.faults if f["fault_id"] != fid]


def _injector(tmp_path, monkeypatch) -> tuple[FaultInjector, FakeCluster]:
    import kafkaproof.faults.injector as injector_mod
    monkeypatch.setattr(injector_mod, "cluster_fault_log", lambda cluster: tmp_path / "faults.jsonl")
    cluster = FakeCluster(tmp_path)
    return FaultInjector(cluster, topic="orders", rng=random.Random(1)), cluster


def test_a_running_node_is_corrupted_at_once_and_a_stopped_one_started_at_the_heal(tmp_path, monkeypatch):
    injector, cluster = _injector(tmp_path, monkeypatch)
    flips = injector.inject(FaultSpec("file_corrupt", "node:2", {**SEGMENT, "segment": "closed", "probability": 1.0,
                                                                 "partition": 1, "seed": 5}))
    assert flips.heal == {} and flips.params["seed"] == 5 and cluster.faults == []  # over when injected
    assert cluster.calls == []
    records = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records] == ["inject", "heal"]
    corrupted = records[0]["effect"]["corrupted"]["2"]
    assert [f["file"] for f in corrupted] == ["orders-1/00000000000000000000.log", "orders-1/00000000000000000120.log"]
    assert all(f["flipped"] == 3 for f in corrupted)  # 10,240 bytes: three ranges of 4,096, each hit

    cut = injector.inject(FaultSpec("file_corrupt", "leader:0", {"file": "segment", "mode": "truncate",
                                                                 "segment": "active", "when": "stopped"}))
    assert cut.heal == {"restart": [1]} and cluster.calls == [("stop", 1, False)]
    assert (cluster.dirs[1] / "orders-0" / "00000000000000001000.log").stat().st_size == 5120
    injector.heal(cut.fault_id)
    assert cluster.calls[1:] == [("start", 1)]  # then its log says it started
    inject = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()][2]
    assert inject["effect"]["node_states"] == {"1": "dead"}
    assert inject["effect"]["corrupted"]["1"] == [
        {"file": "orders-0/00000000000000001000.log", "size": 10240, "cut": 5120},
        {"file": "orders-1/00000000000000001000.log", "size": 10240, "cut": 5120}]


def test_injection_counts_the_partitions_replicas_again(tmp_path, monkeypatch):
    injector, cluster = _injector(tmp_path, monkeypatch)
    with pytest.raises(FaultError, match="would damage 2 of 3 replicas of orders-0: a majority"):
        injector.inject(FaultSpec("file_corrupt", "followers:0", SEGMENT))
    with pytest.raises(FaultError, match="2 of 3 KRaft voters"):
        injector.inject(FaultSpec("file_corrupt", "nodes:1,3", {"file": "snapshot", "mode": "truncate"}))
    assert cluster.calls == [] and cluster.faults == []
    done = injector.inject(FaultSpec("file_corrupt", "all", {"file": "checkpoint", "mode": "truncate",
                                                             "fraction": 0.0, "allow_majority": True}))
    assert done.nodes == [1, 2, 3]
    assert (cluster.dirs[3] / "replication-offset-checkpoint").stat().st_size == 0
    assert target_partition("orders", None) == ("orders", None)
    assert target_partition("orders", 2) == ("orders", 2)
    assert target_partition("orders", "pay.ments-x:3") == ("pay.ments-x", 3)
    assert handler_for("file_corrupt").family.name == "corruption"


def _fault(nodes: list[int], corrupted: dict) -> dict:
    return {"kind": "file_corrupt", "target": "all", "nodes": nodes, "params": "{}",
            "effect": json.dumps({"corrupted": corrupted, "seed": 1})}


def test_the_verdict_takes_a_corruption_only_when_every_targeted_nodes_files_changed():
    flipped = {"file": "orders-0/00000000000000000000.log", "size": 4096, "flipped": 2, "offsets": [1, 4000]}
    cut = {"file": "orders-0/00000000000000000000.log", "size": 4000, "cut": 2000}
    assert job.fault_effect(_fault([1, 2], {"1": [flipped], "2": [cut]})) == (
        True, "node 1: orders-0/00000000000000000000.log (2 bits flipped); "
              "node 2: orders-0/00000000000000000000.log (2,000 of 4,000 bytes cut)")
    missed = job.fault_effect(_fault([1, 2], {"1": [flipped], "2": [{**flipped, "flipped": 0}]}))
    assert missed[0] is False and "node 2: 1 file left unchanged" in missed[1]
    assert job.fault_effect(_fault([1, 3], {"1": [flipped]})) == (
        False, "node 1: orders-0/00000000000000000000.log (2 bits flipped); node 3: no file of the kind found")
    assert job.fault_effect(_fault([], {}))[0] is False


REFUSED_LOG = """[2026-11-28 20:01:02,100] INFO Loading logs from log dirs ArrayBuffer(/d) (kafka.log.LogManager)
[2026-11-28 20:01:02,300] ERROR Error while loading log dir /d (kafka.log.LogManager)
java.lang.IllegalStateException: Expected [1] entries but found only [0]
	at org.apache.kafka.server.common.CheckpointFile$CheckpointReadBuffer.read(CheckpointFile.java:164)
[2026-11-28 20:01:02,400] ERROR Shutdown broker because all log dirs in /d have failed (kafka.log.LogManager)
"""


def test_kafkas_own_exception_line_says_why_a_node_refused_to_start():
    assert refusal_line(REFUSED_LOG) == "java.lang.IllegalStateException: Expected [1] entries but found only [0]"
    fatal = ("[2026-11-28 20:01:02,100] ERROR Encountered fatal fault: Error loading snapshot "
             "(org.apache.kafka.server.fault.ProcessTerminatingFaultHandler)\n"
             "org.apache.kafka.common.errors.CorruptRecordException: Record size 0 is less than the minimum\n")
    assert refusal_line(fatal) == ("org.apache.kafka.common.errors.CorruptRecordException: Record size 0 is less than "
                                   "the minimum")
    inline = "[x] ERROR [RaftManager id=101] Had an exception org.apache.kafka.raft.CorruptSnapshotException: bad (y)"
    assert refusal_line(inline) == inline
    assert refusal_line("[x] ERROR Shutdown broker because all log dirs in /d have failed (z)") == (
        "[x] ERROR Shutdown broker because all log dirs in /d have failed (z)")
    assert refusal_line("INFO nothing wrong\nstarting") is None


def test_a_node_that_refuses_its_damaged_files_is_the_outcome_and_one_that_hangs_a_failed_heal(tmp_path, monkeypatch):
    injector, cluster = _injector(tmp_path, monkeypatch)
    cluster.refuses = {1: REFUSED_LOG}
    cut = injector.inject(FaultSpec("file_corrupt", "node:1", {"file": "checkpoint", "checkpoint": "leader-epoch",
                                                               "mode": "truncate", "when": "stopped", "partition": 0}))
    assert (cluster.dirs[1] / "orders-0" / "leader-epoch-checkpoint").stat().st_size == 4  # 8 bytes cut to 4
    injector.heal(cut.fault_id)
    heal = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()][-1]
    assert heal["event"] == "heal" and heal["start_refused"] == {
        "1": "java.lang.IllegalStateException: Expected [1] entries but found only [0]"}
    effect = job.fault_effect({"kind": "file_corrupt", "target": "node:1", "nodes": [1], "params": "{}",
                               "effect": json.dumps({"corrupted": {"1": [{"file": "orders-0/leader-epoch-checkpoint",
                                                                         "size": 8, "cut": 4}]},
                                                     "start_refused": heal["start_refused"]})})
    assert effect == (True, "node 1: orders-0/leader-epoch-checkpoint (4 of 8 bytes cut); node 1 refused to start on "
                            "them: java.lang.IllegalStateException: Expected [1] entries but found only [0]")
    monkeypatch.setattr(corruption_mod, "START_WAIT_S", 0.5)
    cluster.hangs = {2}
    stuck = injector.inject(FaultSpec("file_corrupt", "node:2", {"file": "snapshot", "mode": "bitflip",
                                                                 "metadata": "snapshots", "when": "stopped"}))
    with pytest.raises(FaultError, match=r"node 2 neither started nor exited within 0.5s; see node-2/server.log"):
        injector.heal(stuck.fault_id)
    assert [f["fault_id"] for f in cluster.faults] == [stuck.fault_id]  # still active: a failed heal


def test_a_compose_scenario_with_file_corrupt_on_an_engine_elsewhere_is_refused_before_anything_starts(monkeypatch):
    from types import SimpleNamespace
    from kafkaproof.errors import KafkaproofError
    from kafkaproof.run.scenario_run import ScenarioRun
    from kafkaproof.spec.scenario import TimelineFault
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.9:2376")
    entries = [TimelineFault(5.0, FaultSpec("file_corrupt", "leader:0", SEGMENT), None, 0)]
    run = SimpleNamespace(scenario=SimpleNamespace(timeline=lambda: entries))
    with pytest.raises(KafkaproofError, match=r"faults file_corrupt are not supported by the compose cluster backend "
                                              r"here: .*the Docker engine tcp://10.0.0.9:2376 runs on another machine"):
        ScenarioRun._refuse_unsupported(run, ComposeCluster.supported_for(), "compose")
