"""Disk faults without a cluster: parameters, rules, what a power loss drops from real files, scenario
checks, backends and the verdict's evidence."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import yaml

from support import REPO, load_analysis_job

from kafkaproof.cluster.compose import ComposeCluster
from kafkaproof.cluster.disk import PAGE, DiskRule, UnsyncedWrites, control_address
from kafkaproof.errors import ClusterError, FaultError, ScenarioError
from kafkaproof.faults import check_fault
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.cluster import ClusterConfig, cluster_config
from kafkaproof.spec.faults import DISK_KINDS, FAULT_KINDS, FaultSpec, disk_rule

job = load_analysis_job()
pytestmark = pytest.mark.unit


def test_parameters_are_checked_before_anything_starts_and_again_by_diskfs():
    assert set(DISK_KINDS) <= set(FAULT_KINDS)
    check_fault(FaultSpec("disk_error", "leader:0", {"op": "read", "path": "orders-0", "errno": "EROFS"}))
    check_fault(FaultSpec("disk_latency", "all", {"ms": 20}))
    check_fault(FaultSpec("power_loss", "followers:0"))
    cases = [(FaultSpec("disk_error", "leader:0", {"op": "append"}), "fault.params.op: 'append' is not an operation"),
             (FaultSpec("disk_error", "leader:0", {"errno": "ENOSPC"}), "fault.params.errno: .*ENOSPC: disk_full"),
             (FaultSpec("disk_full", "all", {"path": "../x"}), "fault.params.path: .* \\(no '..'\\)"),
             (FaultSpec("disk_latency", "all", {"ms": 0}), "fault.params.ms: must be in"),
             (FaultSpec("disk_latency", "all"), "fault.params.ms: required for disk_latency"),
             (FaultSpec("power_loss", "all", {"ms": 1}), "fault.params.ms: not a parameter of power_loss")]
    for spec, message in cases:
        with pytest.raises(FaultError, match=message):
            check_fault(spec)


def test_a_disk_error_fails_writes_unless_told_otherwise_and_rules_match_paths():
    rule = DiskRule.from_json(disk_rule(FaultSpec("disk_error", "leader:0"), "disk_error-1"))
    assert (rule.action, rule.op, rule.errno) == ("error", "write", "EIO")
    assert rule.verdict("write", "orders-0/00000000000000000000.log", False) == (errno.EIO, 0.0)
    assert rule.verdict("read", "orders-0/00000000000000000000.log", False) == (None, 0.0)
    scoped = DiskRule.from_json({"id": "r", "action": "error", "op": "all", "path": "orders"})
    assert scoped.matches("read", "orders-3/x.log") and scoped.matches("meta", "orders-0")
    assert not scoped.matches("write", "__cluster_metadata-0/x.log")
    exact = DiskRule.from_json({"id": "r", "action": "error", "path": "orders-1/"})
    assert exact.matches("write", "orders-1/x.log") and not exact.matches("write", "orders-10/x.log")
    full = DiskRule.from_json(disk_rule(FaultSpec("disk_full", "all"), "f"))
    assert full.verdict("write", "a", True) == (errno.ENOSPC, 0.0)
    assert full.verdict("write", "a", False) == (None, 0.0)  # an overwrite inside the file fits
    slow = DiskRule.from_json(disk_rule(FaultSpec("disk_latency", "all", {"ms": 250}), "s"))
    assert slow.verdict("sync", "a", False) == (None, 0.25)
    with pytest.raises(FaultError, match="action: 'melt'"):
        DiskRule.from_json({"id": "r", "action": "melt"})
    with pytest.raises(FaultError, match="rule.params.op: 'append' is not an operation"):
        DiskRule.from_json({"id": "r", "action": "error", "op": "append"})
    with pytest.raises(FaultError, match="rule.params.ms: a latency rule needs it"):
        DiskRule.from_json({"id": "r", "action": "latency"})
    with pytest.raises(FaultError, match="colour: not a field"):
        DiskRule.from_json({"id": "r", "action": "error", "colour": "red"})


def test_a_disks_control_socket_is_in_the_owners_private_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))
    a, b = control_address(REPO / "a"), control_address(REPO / "b")
    assert a != b and Path(a).name.startswith("diskfs-") and a.endswith(".sock") and len(a.encode()) <= 107
    assert (Path(a).parent.stat().st_mode & 0o777) == 0o700 and Path(a).parent.stat().st_uid == os.geteuid()
    if not Path(a).is_relative_to(tmp_path):  # the short fallback for pytest's deep tmp_path
        Path(a).parent.rmdir()


def _write(track: UnsyncedWrites, root, rel: str, data: bytes, offset: int) -> None:
    """What diskfs does for a write: save the pages first, then write the backing file."""
    fd = os.open(root / rel, os.O_RDWR | os.O_CREAT)
    try:
        track.before_write(rel, fd, offset, len(data))
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def test_a_power_loss_drops_exactly_what_was_written_since_each_files_last_fsync(tmp_path):
    track = UnsyncedWrites()
    # A file that was on the disk before (durable), appended to and partly overwritten since.
    (tmp_path / "seg.log").write_bytes(b"A" * (PAGE + 100))
    _write(track, tmp_path, "seg.log", b"B" * 10, PAGE + 50)   # overwrite inside the durable part
    _write(track, tmp_path, "seg.log", b"C" * 500, PAGE + 100)  # append
    # A file created and written since, never fsynced: it survives empty.
    track.created("new.index")
    _write(track, tmp_path, "new.index", b"D" * 300, 0)
    # A file written and fsynced: it keeps everything.
    track.created("checkpoint.tmp")
    _write(track, tmp_path, "checkpoint.tmp", b"E" * 40, 0)
    track.synced("checkpoint.tmp")
    track.renamed("checkpoint.tmp", "checkpoint")
    os.rename(tmp_path / "checkpoint.tmp", tmp_path / "checkpoint")
    assert track.pending() == {"files": 2, "saved_pages": 1}
    lost = track.power_loss(tmp_path)
    assert (tmp_path / "seg.log").read_bytes() == b"A" * (PAGE + 100)
    assert (tmp_path / "new.index").read_bytes() == b""
    assert (tmp_path / "checkpoint").read_bytes() == b"E" * 40
    assert lost["files"] == 2 and lost["examples"][0]["path"] == "seg.log"
    assert lost["bytes_dropped"] == 500 + (PAGE + 100 - PAGE) + 300  # tail, restored partial page, new file
    assert track.pending() == {"files": 0, "saved_pages": 0}


def test_sizes_set_by_truncate_and_the_namespace_are_durable_at_once(tmp_path):
    track = UnsyncedWrites()
    (tmp_path / "x.index").write_bytes(b"")
    # An index preallocated by truncate and written inside: the zeros are what survives.
    track.truncated("x.index", 0, 2 * PAGE)
    os.truncate(tmp_path / "x.index", 2 * PAGE)
    _write(track, tmp_path, "x.index", b"\x01" * 16, PAGE)
    (tmp_path / "gone").write_bytes(b"z")
    _write(track, tmp_path, "gone", b"y", 1)
    track.removed("gone")
    os.unlink(tmp_path / "gone")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "f").write_bytes(b"")
    _write(track, tmp_path, "dir/f", b"q" * 8, 0)
    track.renamed("dir", "dir.deleted")
    os.rename(tmp_path / "dir", tmp_path / "dir.deleted")
    lost = track.power_loss(tmp_path)
    assert (tmp_path / "x.index").read_bytes() == b"\0" * (2 * PAGE)
    assert (tmp_path / "dir.deleted" / "f").read_bytes() == b""
    assert lost["files"] == 2 and not (tmp_path / "gone").exists()
    # A shrink is durable too: a power loss does not bring back what truncate cut.
    (tmp_path / "y").write_bytes(b"k" * 100)
    track.truncated("y", 100, 10)
    os.truncate(tmp_path / "y", 10)
    assert track.power_loss(tmp_path)["files"] == 0 and (tmp_path / "y").read_bytes() == b"k" * 10


def _scenario(tmp_path, **cluster):
    doc = {"name": "disky", "guarantee": "at-least-once", "producers": {"messages": 100},
           "cluster": {"brokers": 3, **cluster},
           "faults": [{"at": 2, "kind": "power_loss", "target": "leader:0", "duration": 2}]}
    path = tmp_path / "disky.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_disk_fault_implies_a_local_cluster_on_diskfs(tmp_path):
    scn = scenario_mod.load(_scenario(tmp_path))
    assert scn.data["cluster"]["disk"] is True and cluster_config(scn.data, "c").disk is True
    assert scenario_mod.load(REPO / "scenarios" / "baseline.yaml").data["cluster"].get("disk") is None  # hash kept
    with pytest.raises(ScenarioError, match="cluster.disk: false, but faults\\[0\\] \\(power_loss\\) needs it"):
        scenario_mod.load(_scenario(tmp_path, disk=False))
    with pytest.raises(ScenarioError, match="cluster.backend: compose: .* log directories are on diskfs"):
        scenario_mod.load(_scenario(tmp_path, backend="compose"))
    with pytest.raises(ClusterError, match="only the local backend"):
        ClusterConfig(backend="compose", disk=True).validate()
    assert not set(DISK_KINDS) & ComposeCluster.supported_for()
    for name in ("disk-power-loss-all-replicas", "disk-power-loss-leader", "disk-error-leader", "disk-full-leader",
                 "disk-latency-leader", "disk-power-loss-all-replicas-fsync"):
        assert scenario_mod.load(REPO / "scenarios" / f"{name}.yaml").data["cluster"]["disk"] is True
    assert scenario_mod.load(REPO / "scenarios" / "disk-power-loss-all-replicas.yaml").expect["outcome"] == "detect"


def _fault(kind: str, effect: dict) -> dict:
    import json
    return {"kind": kind, "target": "all", "params": "{}", "effect": json.dumps(effect)}


def test_the_verdict_takes_a_disk_fault_only_when_it_did_something():
    assert {*job.DISK_RULE_KINDS, "power_loss"} == set(DISK_KINDS)  # the job's copy (it runs without the package)
    assert job.fault_effect(_fault("disk_error", {"disk_fired": 12})) == (True, "the disk rule failed 12 operations")
    assert job.fault_effect(_fault("disk_latency", {"disk_fired": 3})) == (True, "the disk rule slowed 3 operations")
    assert job.fault_effect(_fault("disk_full", {"disk_fired": 1})) == (True, "the disk rule failed 1 operation")
    assert job.fault_effect(_fault("disk_full", {"disk_fired": 0}))[0] is False
    assert job.fault_effect(_fault("disk_full", {})) == (False, "the disk rule's count was not recorded")
    cut = {"node_states": {"1": "dead", "2": "dead"},
           "power_loss": {"1": {"bytes_dropped": 123456, "files": 9}, "2": {"bytes_dropped": 10, "files": 1}}}
    assert job.fault_effect(_fault("power_loss", cut)) == (
        True, "node 1 dead, its disk dropped 123,456 unsynced bytes of 9 files; "
              "node 2 dead, its disk dropped 10 unsynced bytes of 1 file")
    assert job.fault_effect(_fault("power_loss", {"node_states": {"1": "running"}}))[0] is False
    assert job.fault_effect(_fault("power_loss", {})) == (False, "no node state was recorded after the power loss")


def test_a_random_schedule_that_draws_disk_faults_implies_diskfs(tmp_path):
    doc = {"name": "nemesis", "guarantee": "at-least-once", "producers": {"messages": 1000, "rate": 100},
           "cluster": {"brokers": 3},
           "faults": {"random": {"seed": 7, "kinds": [{"kind": "power_loss"},
                                                      {"kind": "disk_latency", "params": {"ms": 20}}],
                                 "targets": ["random", "leader:0"], "interval_s": [2, 4], "duration_s": [1, 2]}}}
    path = tmp_path / "nemesis.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert scenario_mod.load(path).data["cluster"]["disk"] is True
    doc["faults"]["random"]["kinds"][1]["params"] = {"ms": -1}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match="faults.random.kinds\\[1\\].params.ms: must be in"):
        scenario_mod.load(path)
