"""diskfs: the FUSE filesystem under a node's log directory, run as `python -m kafkaproof.cluster.diskfs`.

Every operation passes through to a backing directory; rules (`disk.DiskRule`) fail or slow
operations, and `disk.UnsyncedWrites` remembers what was written since each file's last fsync so
that `power_loss` drops exactly that. Control: a Unix socket in its owner's private directory
(`disk.control_address`, or `--control`; mode 0700, and a peer of another uid is refused by its
credentials) taking one JSON request per line (`add_rule`, `remove_rule`, `rules`,
`pending`, `power_loss`, `ping`). The process ends when its mount is unmounted or on SIGTERM
(libfuse's handlers unmount first). docs/disk.md.
"""
from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mfusepy

from .. import controlsock
from .disk import DiskRule, UnsyncedWrites, control_address, syncfs

log = logging.getLogger("kafkaproof.diskfs")


class FaultFS(mfusepy.Operations):
    """A passthrough filesystem over `backing` with fault rules and a record of unsynced writes."""

    use_ns = True

    def __init__(self, backing: Path, mount: Path):
        self.backing = backing
        self.mount = mount
        self.rules: list[DiskRule] = []
        self.rules_lock = threading.Lock()
        self.unsynced = UnsyncedWrites()

    # --- faults ----------------------------------------------------------------------------------
    def _fault(self, op: str, path: str, grows: bool = False) -> None:
        """Apply the rules to one operation: wait what latency rules say, then fail if a rule says so."""
        if not self.rules:
            return
        rel = path.lstrip("/")
        delay, fail = 0.0, None
        with self.rules_lock:
            for rule in self.rules:
                code, wait = rule.verdict(op, rel, grows)
                if code is not None and fail is None:
                    rule.fired += 1
                    fail = code
                elif wait:
                    rule.fired += 1
                    delay += wait
        if delay:
            time.sleep(delay)
        if fail is not None:
            raise mfusepy.FuseOSError(fail)

    def _full(self, path: str) -> str:
        return str(self.backing) + path

    # --- namespace -------------------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_uid": st.st_uid, "st_gid": st.st_gid,
                "st_size": st.st_size, "st_blocks": st.st_blocks, "st_atime": st.st_atime_ns,
                "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._full(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._fault("meta", path, grows=True)
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._fault("meta", path)
        os.rmdir(self._full(path))
        self.unsynced.removed(path.lstrip("/"))
        return 0

    def unlink(self, path: str) -> int:
        self._fault("meta", path)
        os.unlink(self._full(path))
        self.unsynced.removed(path.lstrip("/"))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._fault("meta", old)
        os.rename(self._full(old), self._full(new))
        self.unsynced.renamed(old.lstrip("/"), new.lstrip("/"))
        return 0

    def link(self, target: str, source: str) -> int:
        self._fault("meta", target, grows=True)
        os.link(self._full(source), self._full(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        self._fault("meta", target, grows=True)
        os.symlink(source, self._full(target))
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._full(path), ns=times) if times else os.utime(self._full(path))
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                    "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    # --- files -----------------------------------------------------------------------------------
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        self._fault("meta", path, grows=True)
        fd = os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)
        self.unsynced.created(path.lstrip("/"))
        return fd

    def open(self, path: str, flags: int) -> int:
        # The kernel gives every write its offset (an O_APPEND file's end included): pwrite must honour it.
        return os.open(self._full(path), flags & ~os.O_APPEND)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._fault("read", path)
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if self.rules:
            self._fault("write", path, grows=offset + len(data) > os.fstat(fh).st_size)
        with self.unsynced.lock:
            self.unsynced.before_write(path.lstrip("/"), fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        size = os.fstat(fh).st_size if fh is not None else os.lstat(self._full(path)).st_size
        self._fault("write", path, grows=length > size)
        with self.unsynced.lock:
            os.ftruncate(fh, length) if fh is not None else os.truncate(self._full(path), length)
            self.unsynced.truncated(path.lstrip("/"), size, length)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        # Durability is this filesystem's to decide: an fsync makes the file's writes survive a power loss
        # here; the backing directory needs no fsync of its own.
        self._fault("sync", path)
        self.unsynced.synced(path.lstrip("/"))
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self._fault("sync", path)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # --- control ---------------------------------------------------------------------------------
    def control(self, request: dict[str, Any]) -> Any:
        """Answer one control request (see the module docstring)."""
        op = request.get("op")
        if op == "ping":
            return {"pid": os.getpid(), "mount": str(self.mount)}
        if op == "add_rule":
            rule = DiskRule.from_json(request.get("rule") or {})
            with self.rules_lock:
                if any(r.id == rule.id for r in self.rules):
                    raise ValueError(f"a rule with id {rule.id!r} is already active")
                self.rules = [*self.rules, rule]
            log.info("rule %s added: %s", rule.id, rule.to_json())
            return rule.to_json()
        if op == "remove_rule":
            with self.rules_lock:
                gone = [r for r in self.rules if r.id == request.get("id")]
                self.rules = [r for r in self.rules if r.id != request.get("id")]
            if gone:
                log.info("rule %s removed after firing %d times", gone[0].id, gone[0].fired)
            return gone[0].to_json() if gone else None
        if op == "rules":
            with self.rules_lock:
                return [r.to_json() for r in self.rules]
        if op == "pending":
            return self.unsynced.pending()
        if op == "power_loss":
            # The kernel may still hold dirty pages of mmapped files (a dead JVM's index writes): written
            # back first, they are dropped with the rest rather than landing after the drop.
            syncfs(self.mount)
            lost = self.unsynced.power_loss(self.backing)
            log.info("power loss: dropped %d bytes of %d files", lost["bytes_dropped"], lost["files"])
            return lost
        raise ValueError(f"unknown op {op!r}; allowed: ping, add_rule, remove_rule, rules, pending, power_loss")


def serve_control(fs: FaultFS, path: str | None = None) -> socketserver.ThreadingUnixStreamServer:
    """Serve the control socket (`path`, default `disk.control_address`) in a daemon thread, to this user only."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            refused = controlsock.peer_refusal(self.request)
            if refused:
                log.warning("control connection refused: %s", refused)
                if self.rfile.readline():  # the request first: the caller then reads the reason, not a broken pipe
                    self.wfile.write(json.dumps({"error": refused}).encode() + b"\n")
                return
            for line in self.rfile:
                try:
                    answer = {"result": fs.control(json.loads(line))}
                except Exception as e:  # every refusal goes back to the caller, with its reason
                    answer = {"error": f"{type(e).__name__}: {e}"}
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()

    path = path or control_address(fs.mount)
    Path(path).unlink(missing_ok=True)
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    os.chmod(path, 0o600)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="diskfs-control", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkaproof.cluster.diskfs", description=__doc__.splitlines()[0])
    parser.add_argument("--backing", required=True, type=Path)
    parser.add_argument("--mount", required=True, type=Path)
    parser.add_argument("--control", help="the control socket's path (default: disk.control_address of the mount)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s.%(msecs)03d %(levelname)-5s %(name)s: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")
    fs = FaultFS(args.backing.resolve(), args.mount.resolve())
    server = serve_control(fs, args.control)
    log.info("diskfs: %s on %s", fs.backing, fs.mount)
    try:
        # Not `direct_io`: the JVM maps index files (MAP_SHARED), which needs the page cache.
        mfusepy.FUSE(fs, str(fs.mount), foreground=True, nothreads=False, fsname="kafkaproof-diskfs",
                     subtype="kafkaproof")
    finally:
        server.shutdown()
        Path(server.server_address).unlink(missing_ok=True)
    log.info("diskfs: %s unmounted", fs.mount)
    return 0


if __name__ == "__main__":
    sys.exit(main())
