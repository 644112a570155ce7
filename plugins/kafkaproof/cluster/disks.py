"""The faulty disks of a local cluster: one diskfs (FUSE) process per node, under its log directory.

A cluster started with disk faults on (`ClusterConfig.disk`) mounts `diskfs.py` on each node's
`data/`, backed by `data.disk/` next to it (the directory the node was formatted in, so what the
storage tool wrote counts as on disk). Each filesystem runs in the
root namespace in its own session, like the brokers; its pid is in the state file
(`nodes[].disk`, with its control socket, its owner's only), so a teardown unmounts it after a crash, and `down --all` lazily unmounts any
kafkaproof FUSE mount a crash left under the state directory. See docs/disk.md.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from ..errors import ClusterError, FaultError
from . import process, state
from .disk import BACKING_DIR, DiskControl, control_address, fuse_mounts_under, legacy_control_address, unmount
from .process import ProcessRef
from .state import ClusterState, DiskEntry, NodeState

log = logging.getLogger(__name__)

DISK_START_TIMEOUT_S = 20.0


class DiskFleet:
    """Mixin of the local backend: its nodes' diskfs processes (`capabilities.FaultyDisks`)."""

    # what the class it is mixed into provides (`capabilities.ClusterCore`, and the local backend)
    name: str
    state: Callable[[], ClusterState]
    node: Callable[[int], NodeState]
    node_dir: Callable[[int], Path]
    node_state: Callable[[int], str]
    node_ref: Callable[[int], ProcessRef | None]
    stop_node: Callable[..., None]
    unsupported_reason: Callable[[str], str]

    @property
    def has_disk(self) -> bool:
        return bool(self.state().disk)

    def disk_mount(self, node_id: int) -> Path:
        """The node's log directory: the diskfs mount point."""
        return self.node_dir(node_id) / "data"

    def disk_state(self, node_id: int) -> str:
        """running / paused / dead of the node's diskfs process ('none' without disk faults)."""
        disk = self.node(node_id).disk
        if not disk:
            return "none"
        return process.state_of(disk.process)

    def start_disk(self, node_id: int) -> None:
        """Mount the node's diskfs on its log directory (no-op if it is running); returns once it answers."""
        if self.disk_state(node_id) == "running":
            return
        mount, backing = self.disk_mount(node_id), self.node_dir(node_id) / BACKING_DIR
        for stale in fuse_mounts_under(mount):  # a filesystem whose process died leaves its mount behind
            unmount(stale, lazy=True)
        mount.mkdir(parents=True, exist_ok=True)
        backing.mkdir(parents=True, exist_ok=True)
        control = control_address(mount)
        cmd = [sys.executable, "-m", "kafkaproof.cluster.diskfs", "--backing", str(backing), "--mount", str(mount),
               "--control", control]
        with open(self.node_dir(node_id) / "disk.log", "ab") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.node_dir(node_id), env=process.module_env(), start_new_session=True)
        ref = process.ref_for(popen.pid)
        with state.update_node(self.name, node_id) as n:  # recorded before we wait: a crash now still unmounts it
            n.disk = DiskEntry(ref, control)
        deadline = time.monotonic() + DISK_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                break
            if fuse_mounts_under(mount):
                with contextlib.suppress(FaultError), DiskControl(mount, timeout_s=2.0, address=control) as client:
                    client.call("ping")
                    log.info("disk of node %d mounted (pid %d): %s", node_id, popen.pid, mount)
                    return
            time.sleep(0.05)
        process.terminate(ref, grace_s=2.0)
        tail = (self.node_dir(node_id) / "disk.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise ClusterError(f"the disk (diskfs) of node {node_id} did not mount on {mount}: {' | '.join(tail)}")

    def stop_disk(self, node_id: int) -> None:
        """Unmount the node's diskfs and end its process (the node must be stopped)."""
        disk = self.node(node_id).disk
        if not disk:
            return
        mount = self.disk_mount(node_id)
        ref = disk.process
        if fuse_mounts_under(mount) and not unmount(mount):
            unmount(mount, lazy=True)
        # Other nodes' JVMs (each in a mount namespace of its own, copied from ours when it started) still
        # hold the mount: the process only ends when told to.
        process.terminate(ref, grace_s=5.0)

    def stop_disks(self) -> None:
        """Unmount every node's diskfs (teardown; nodes stopped first)."""
        for node in self.state().nodes:
            if node.disk:
                self.stop_disk(node.id)

    def disk_control(self, node_id: int) -> DiskControl:
        """A connected control client of the node's diskfs (close it after use)."""
        if not self.has_disk:
            raise FaultError(self.unsupported_reason("disk_error"))
        if self.disk_state(node_id) != "running":
            raise FaultError(f"the disk (diskfs) of node {node_id} is not running")
        # A diskfs of an older kafkaproof recorded no socket: it listens in the abstract namespace.
        address = self.node(node_id).disk.control or legacy_control_address(self.disk_mount(node_id))
        return DiskControl(self.disk_mount(node_id), timeout_s=30.0, address=address)

    def power_loss(self, node_ids: list[int]) -> dict[int, dict]:
        """Cut the power of nodes at once: kill their JVMs, drop from their disks every write since the
        file's last fsync, and mount their disks afresh (a reboot: the kernel's page cache of the old mount
        is gone). The nodes stay down until started. Returns what each disk dropped."""
        if not self.has_disk:
            raise FaultError(self.unsupported_reason("power_loss"))
        refs = {n: self.node_ref(n) for n in node_ids}
        for ref in refs.values():  # every node first, so no node writes after another lost its power
            if process.state_of(ref) != "dead":
                with contextlib.suppress(FaultError, ProcessLookupError):
                    process.send_signal(ref, signal.SIGKILL)
        for n in node_ids:
            self.stop_node(n, graceful=False)
        dropped = {}
        for n in node_ids:
            with self.disk_control(n) as control:
                dropped[n] = {**control.power_loss(), "node_state": self.node_state(n)}
            self.stop_disk(n)
            self.start_disk(n)
        return dropped


def unmount_leftovers(directory: Path) -> list[str]:
    """Lazily unmount every FUSE mount at or under `directory` (a crashed cluster's disks); returns them."""
    mounts = fuse_mounts_under(directory)
    for mount in mounts:
        log.warning("unmounting %s, which a crashed run left", mount)
        unmount(mount, lazy=True)
    return mounts
