"""A node's faulty disk: the rules of the FUSE filesystem under its log directory, what a power loss drops,
and the client of the filesystem's control socket.

A node of a cluster started with disk faults on (`ClusterConfig.disk`) keeps its log directory on
`diskfs` (see `diskfs.py`), a FUSE filesystem passing every operation through to a backing directory
next to it (`data.disk/`). Rules make it fail or slow down operations (Trogdor's Kibosh idea), and
it remembers what was written since each file's last fsync so that a power loss can drop exactly
that (Jepsen's lazyfs idea). This module is pure apart from `UnsyncedWrites.power_loss` (which
rewrites backing files) and `DiskControl` (a socket, its owner's only: `controlsock`); it never imports libfuse. docs/disk.md.
"""
from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import controlsock
from ..errors import FaultError
from ..spec.faults import DISK_ERRNOS, check_disk_params

RULE_ACTIONS = ("error", "full", "latency")
ERRNO_CODES = {name: getattr(errno, name) for name in DISK_ERRNOS}
# Pages of a file saved before their first overwrite since its last fsync (the page cache's unit).
PAGE = 4096
BACKING_DIR = "data.disk"


def control_address(mount: Path) -> str:
    """The control socket of the diskfs on `mount`: a path in the owner's private socket directory
    (`controlsock.socket_dir`, mode 0700), named after the mount point."""
    return str(controlsock.socket_path("diskfs-" + _mount_digest(mount)))


def legacy_control_address(mount: Path) -> str:
    """Where a diskfs of an older kafkaproof (abstract namespace, no permissions) listens: a cluster kept
    across an upgrade is still healed through it."""
    return "\0kafkaproof-diskfs-" + _mount_digest(mount)


def _mount_digest(mount: Path) -> str:
    """Pure but for resolving the path: the name a mount point's control socket carries."""
    import hashlib
    return hashlib.sha1(str(Path(mount).resolve()).encode()).hexdigest()[:20]


@dataclass
class DiskRule:
    """One fault of a node's disk: fail (`error`: errno; `full`: ENOSPC where a file would grow) or slow
    (`latency`: `ms` before the operation) the operations `op` on paths starting with `path` (relative to
    the log directory; '' is all of it). `fired` counts the operations it changed: the fault's evidence."""

    id: str
    action: str
    op: str = "all"
    path: str = ""
    errno: str = "EIO"
    ms: float = 0.0
    fired: int = 0

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "DiskRule":
        """Parse and check a rule (as the control socket receives it); FaultError naming the field."""
        allowed = {"id", "action", "op", "path", "errno", "ms"}
        for key in data:
            if key not in allowed:
                raise FaultError(f"{key}: not a field of a disk rule; allowed: {', '.join(sorted(allowed))}")
        rule = DiskRule(id=str(data.get("id") or ""), action=str(data.get("action")), op=str(data.get("op", "all")),
                        path=str(data.get("path", "")).lstrip("/"), errno=str(data.get("errno", "EIO")),
                        ms=float(data.get("ms", 0)))
        if not re.fullmatch(r"[\w.-]+", rule.id):
            raise FaultError(f"id: {rule.id!r} must be letters, digits, '.', '_' or '-'")
        if rule.action not in RULE_ACTIONS:
            raise FaultError(f"action: {rule.action!r} is not one; allowed: {', '.join(RULE_ACTIONS)}")
        check_disk_params({k: v for k, v in data.items() if k in ("op", "errno", "path", "ms")}, "rule")
        if rule.action == "latency" and "ms" not in data:
            raise FaultError("rule.params.ms: a latency rule needs it")
        return rule

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def matches(self, op: str, path: str) -> bool:
        """Pure: whether the rule applies to operation `op` on `path` (relative, no leading '/'). `path` is a
        prefix, as Trogdor's: `orders-` is every partition of `orders`, `orders-0/` one partition."""
        if self.op != "all" and self.op != op:
            return False
        return path.startswith(self.path) or (self.path.endswith("/") and path == self.path[:-1])

    def verdict(self, op: str, path: str, grows: bool) -> tuple[int | None, float]:
        """Pure: (errno to fail with or None, seconds to wait first) for one operation."""
        if not self.matches(op, path):
            return None, 0.0
        if self.action == "error":
            return ERRNO_CODES[self.errno], 0.0
        if self.action == "full":
            return (errno.ENOSPC, 0.0) if grows else (None, 0.0)
        return None, self.ms / 1000.0


@dataclass
class FileHistory:
    """What a power loss leaves of one file: its size at its last fsync, and the content of each page
    overwritten since, as it was then."""

    synced_size: int
    pages: dict[int, bytes] = field(default_factory=dict)


class UnsyncedWrites:
    """Everything written since each file's last fsync, so that a power loss can drop it.

    Data written with write(2) is durable only once its file is fsynced; a size set by truncate and
    the namespace (create, rename, unlink) are durable at once, as a journaling filesystem's metadata.
    A file created since the last fsync survives a power loss empty. Paths are relative to the root.
    Thread-safe: FUSE calls in from many threads.
    """

    def __init__(self) -> None:
        self.files: dict[str, FileHistory] = {}
        self.lock = threading.RLock()

    def before_write(self, path: str, fd: int, offset: int, length: int) -> None:
        """Save the pages a write is about to overwrite for the first time since the file's last fsync."""
        with self.lock:
            h = self.files.get(path)
            if h is None:
                h = self.files[path] = FileHistory(os.fstat(fd).st_size)
            if length <= 0 or offset >= h.synced_size:
                return
            last = min(offset + length, h.synced_size) - 1
            for page in range(offset // PAGE, last // PAGE + 1):
                if page not in h.pages:
                    h.pages[page] = os.pread(fd, PAGE, page * PAGE)

    def truncated(self, path: str, size_before: int, size: int) -> None:
        """A size set by truncate is durable at once: the synced size follows a shrink, and an extension's
        zeros are what a power loss leaves there."""
        with self.lock:
            h = self.files.get(path)
            if h is None:
                h = self.files[path] = FileHistory(size_before)
            if size < h.synced_size:
                h.synced_size = size
                h.pages = {p: data for p, data in h.pages.items() if p * PAGE < size}
            elif size > h.synced_size and size_before <= h.synced_size:
                h.synced_size = size

    def created(self, path: str) -> None:
        with self.lock:
            self.files[path] = FileHistory(0)

    def synced(self, path: str) -> None:
        with self.lock:
            self.files.pop(path, None)

    def removed(self, path: str) -> None:
        with self.lock:
            for p in [p for p in self.files if p == path or p.startswith(path + "/")]:
                del self.files[p]

    def renamed(self, old: str, new: str) -> None:
        with self.lock:
            self.removed(new)
            for p in [p for p in self.files if p == old or p.startswith(old + "/")]:
                self.files[new + p[len(old):]] = self.files.pop(p)

    def pending(self) -> dict[str, int]:
        """How many files have writes since their last fsync, and how many of their pages are saved to undo."""
        with self.lock:
            return {"files": len(self.files),
                    "saved_pages": sum(len(h.pages) for h in self.files.values())}

    def power_loss(self, root: Path) -> dict[str, Any]:
        """Drop every write since each file's last fsync from the backing files under `root`; returns how
        many files and bytes went, with the largest losses as examples. The node must be dead."""
        lost: dict[str, int] = {}
        with self.lock:
            for path, h in self.files.items():
                full = root / path
                try:
                    fd = os.open(full, os.O_RDWR)
                except FileNotFoundError:
                    continue
                try:
                    size = os.fstat(fd).st_size
                    changed = sum(len(data) for data in h.pages.values())
                    for page, data in h.pages.items():
                        os.pwrite(fd, data, page * PAGE)
                    if size != h.synced_size:
                        os.ftruncate(fd, h.synced_size)
                finally:
                    os.close(fd)
                dropped = max(0, size - h.synced_size) + changed
                if dropped:
                    lost[path] = dropped
            self.files.clear()
        examples = sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
        return {"files": len(lost), "bytes_dropped": sum(lost.values()),
                "examples": [{"path": p, "bytes": n} for p, n in examples]}


# --- the control socket (one JSON request per line, one JSON answer per line) -----------------------

class DiskControl:
    """Client of the control socket of the diskfs mounted at `mount`."""

    def __init__(self, mount: Path, timeout_s: float = 30.0, address: str | None = None):
        self.path = Path(mount)
        address = address or control_address(self.path)
        try:
            if address.startswith("\0"):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout_s)
                try:
                    self.sock.connect(address)
                except OSError:
                    self.sock.close()
                    raise
            else:
                self.sock = controlsock.connect_unix(address, timeout_s, f"the control socket of the disk at {mount}")
        except OSError as e:
            raise FaultError(f"the disk mounted at {self.path} does not answer on {address!r}: {e}") from e
        self.file = self.sock.makefile("rwb")

    def __enter__(self) -> "DiskControl":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def call(self, op: str, **args: Any) -> Any:
        """One request; FaultError with the filesystem's message when it refuses."""
        self.file.write(json.dumps({"op": op, **args}).encode() + b"\n")
        self.file.flush()
        line = self.file.readline()
        if not line:
            raise FaultError(f"the disk at {self.path} closed the connection during {op!r}")
        answer = json.loads(line)
        if "error" in answer:
            raise FaultError(f"the disk at {self.path} refused {op!r}: {answer['error']}")
        return answer.get("result")

    def add_rule(self, rule: Mapping[str, Any]) -> None:
        self.call("add_rule", rule=dict(rule))

    def remove_rule(self, rule_id: str) -> dict | None:
        """Remove a rule; returns it with its final `fired` count (None: there was none)."""
        return self.call("remove_rule", id=rule_id)

    def rules(self) -> list[dict]:
        return self.call("rules")

    def power_loss(self) -> dict:
        return self.call("power_loss")

    def pending(self) -> dict:
        return self.call("pending")


# --- mounts ---------------------------------------------------------------------------------------

def fuse_mounts_under(directory: Path) -> list[str]:
    """Mount points of FUSE filesystems at or under `directory` (this mount namespace), deepest first."""
    base = str(Path(directory).resolve())
    found = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("fuse"):
            mount = parts[1].replace("\\040", " ")
            if mount == base or mount.startswith(base + "/"):
                found.append(mount)
    return sorted(found, key=len, reverse=True)


def unmount(mount: str | Path, lazy: bool = False) -> bool:
    """Unmount a FUSE mount point (lazily: even when busy or its daemon is gone); True when it went."""
    cmd = ["umount", *(["-l"] if lazy else []), str(mount)]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def syncfs(mount: str | Path) -> None:
    """Write back the kernel's dirty pages of one filesystem (mmapped index writes of a dead JVM), so they
    reach diskfs before it drops what was not fsynced, not after."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(str(mount), os.O_RDONLY | os.O_DIRECTORY)
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({mount}): {os.strerror(err)}")
    finally:
        os.close(fd)
