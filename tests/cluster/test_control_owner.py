"""Fault controls only for their owner (issue 37): a second Unix user, made by the test, is refused on every
control channel — a fault proxy's, a diskfs', a run's fault-task control, and `kafkaproof fault` on a cluster —
while the owner (this process's user) succeeds. No Kafka: the proxies front kafkaproof's fake broker.

The outsider first meets the file system (0700 directories: connect fails); the channels are then opened on
purpose (0711 directories, 0666 sockets) to show that the server's own check of the peer's uid
(`SO_PEERCRED`) refuses them as well.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from kafkaproof import controlsock
from kafkaproof.cluster.disk import DiskControl, fuse_mounts_under, unmount
from kafkaproof.proxy import ProxyProcess
from kafkaproof.run.control import RunControl

from support import REPO, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

OUTSIDER = "kp-outsider"
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"

# The attacker's view of a Unix control socket: no kafkaproof, one JSON line (as in the issue).
RAW = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"connect_error": e.strerror})); sys.exit(0)
s.sendall(sys.argv[2].encode() + b"\\n")
print(json.dumps({"reply": s.makefile().readline().strip()}))
"""


@pytest.fixture(scope="module")
def outsider() -> str:
    """A second Unix user (created once if missing) that runs Python from a path it may read."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates a second user and runs commands as it")
    if subprocess.run(["id", OUTSIDER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OUTSIDER],
                       check=True, capture_output=True)
    return OUTSIDER


def system_python() -> str:
    """A Python of the venv's version the outsider may run (the venv's own may sit under /root)."""
    for candidate in (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}", "/usr/bin/python3"):
        probe = subprocess.run(["runuser", "-u", OUTSIDER, "--", candidate, "-c",
                                "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
            return candidate
    pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} the outsider may run")


def as_outsider(*argv: str, env: dict[str, str] | None = None, kafkaproof: bool = False,
                timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a Python program as the outsider (with kafkaproof and the venv's packages importable if asked)."""
    extra = {"HOME": "/tmp", **(env or {})}
    if kafkaproof:
        extra["PYTHONPATH"] = f"{REPO / 'plugins'}:{SITE}"
    cmd = ["runuser", "-u", OUTSIDER, "--", "env", *(f"{k}={v}" for k, v in extra.items()), system_python(), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/tmp")


def raw(path: str | Path, request: dict) -> dict:
    """What the outsider gets for one raw JSON line on a Unix control socket."""
    result = as_outsider("-c", RAW, str(path), json.dumps(request))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def open_up(socket_path: Path) -> None:
    """Let anyone reach a socket (directory traversable, socket 0666): only the server's own check remains."""
    os.chmod(socket_path.parent, 0o711)
    os.chmod(socket_path, 0o666)


@pytest.fixture
def short_tmp():
    """A directory with a short path (sockets under pytest's own tmp_path would pass 107 bytes), others may
    traverse (the outsider must reach what is opened to it)."""
    path = Path(tempfile.mkdtemp(prefix="kp-own-", dir="/tmp"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_fault_proxys_control_socket_obeys_only_its_owner(outsider):
    with ProxyProcess(["1@127.0.0.1:0=127.0.0.1:9"]) as proxy:
        path = Path(controlsock.unix_path(proxy.ready["control"]))
        assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
        blackhole = {"op": "add_rule", "rule": {"action": "blackhole"}}
        assert raw(path, blackhole) == {"connect_error": "Permission denied"}
        open_up(path)
        reply = json.loads(raw(path, blackhole)["reply"])
        assert reply == {"ok": False, "error": "this control socket accepts only its owner root (uid 0); the "
                                               f"connecting process runs as {controlsock.user_label(_uid())}"}
        assert proxy.rules() == []  # nothing was installed
        assert proxy.add_rule({"action": "latency", "ms": 1}) == "r1"  # the owner still is obeyed


def test_a_disks_control_socket_obeys_only_its_owner(outsider, short_tmp):
    if not Path("/dev/fuse").exists() or not shutil.which("fusermount3") and not shutil.which("fusermount"):
        pytest.skip("no FUSE")
    mount, backing, sock = short_tmp / "data", short_tmp / "data.disk", short_tmp / "sockets" / "disk.sock"
    mount.mkdir()
    backing.mkdir()
    controlsock.private_dir(sock.parent)
    proc = subprocess.Popen([sys.executable, "-m", "kafkaproof.cluster.diskfs", "--backing", str(backing),
                             "--mount", str(mount), "--control", str(sock)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: sock.exists() and fuse_mounts_under(mount), 15, "diskfs mounted")
        with DiskControl(mount, timeout_s=5, address=str(sock)) as owner:
            assert owner.call("ping")["mount"] == str(mount)
        fail_writes = {"op": "add_rule", "rule": {"id": "x", "action": "error", "op": "write"}}
        assert raw(sock, fail_writes) == {"connect_error": "Permission denied"}
        open_up(sock)
        reply = json.loads(raw(sock, fail_writes)["reply"])
        assert reply == {"error": "this control socket accepts only its owner root (uid 0); the connecting "
                                  f"process runs as {controlsock.user_label(_uid())}"}
        with DiskControl(mount, timeout_s=5, address=str(sock)) as owner:
            assert owner.rules() == []
    finally:
        unmount(mount) or unmount(mount, lazy=True)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_a_runs_fault_task_control_obeys_only_its_owner(outsider, short_tmp, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(short_tmp / "state"))
    os.makedirs(short_tmp / "state", mode=0o711)
    name = f"own-{uuid.uuid4().hex[:6]}"
    control = RunControl(name)
    control.reset()
    assert (short_tmp / "state" / "control").stat().st_mode & 0o777 == 0o700
    # the outsider's fault task: refused by the file system, with the reason
    task = as_outsider("-c", f"from kafkaproof.run.control import drive_fault; drive_fault({name!r}, 0, 5)",
                       env={"KAFKAPROOF_STATE": str(short_tmp / "state")}, kafkaproof=True)
    assert task.returncode != 0
    assert (f"ControlRefused: the run control {control.dir}/ready accepts only its owner root (uid 0); this process "
            f"runs as {controlsock.user_label(_uid())} (Permission denied)") in task.stderr, task.stderr
    # opened on purpose: the run ignores the outsider's ready mark and requests
    for d in (control.dir.parent, control.dir):
        os.chmod(d, 0o777)
    forged = ("import json, os, sys; d = sys.argv[1]\n"
              "for sub, name in (('ready', '0.json'), ('requests', '0-inject.json')):\n"
              "    os.makedirs(os.path.join(d, sub), exist_ok=True); os.chmod(os.path.join(d, sub), 0o777)\n"
              "    open(os.path.join(d, sub, name), 'w').write(json.dumps({'index': 0, 'pid': os.getpid(), "
              "'host': os.uname().nodename, 'action': 'inject'}))\n")
    result = as_outsider("-c", forged, str(control.dir))
    assert result.returncode == 0, result.stderr
    assert (control.dir / "requests" / "0-inject.json").stat().st_uid == _uid()
    assert control.requested(0, "inject") is None and control.task_gone(0) is None
    with pytest.raises(Exception, match=r"faults\[0\] did not start"):
        control.wait_ready([0], timeout_s=0.3)
    # the owner's own task is obeyed
    (control.dir / "requests" / "0-inject.json").unlink()
    (control.dir / "ready" / "0.json").unlink()
    control.mark_ready(0)
    control.wait_ready([0], timeout_s=1)
    control.remove()


def test_kafkaproof_fault_on_a_proxied_cluster_is_the_owners_also_after_a_crash(outsider, tmp_path):
    """`cluster up --bootstrap` over the fake broker: the owner injects with `kafkaproof fault`, the outsider is
    refused (the state file and the sockets are the owner's), and `cluster down --all` heals after the
    owner's processes are gone."""
    fake = subprocess.Popen([sys.executable, "-c", FAKE_BROKER], stdout=subprocess.PIPE, text=True)
    name = f"own-{uuid.uuid4().hex[:6]}"
    try:
        bootstrap = fake.stdout.readline().strip()
        kp = [sys.executable, "-m", "kafkaproof"]
        up = subprocess.run([*kp, "cluster", "up", "--bootstrap", bootstrap, "--name", name], capture_output=True,
                            text=True, timeout=60)
        assert up.returncode == 0, up.stderr[-2000:]
        st = json.loads((Path(os.environ["KAFKAPROOF_STATE"]) / "clusters" / name / "state.json").read_text())
        sock = Path(controlsock.unix_path(st["nodes"][0]["proxy"]["control"]))
        assert sock.parent.stat().st_mode & 0o777 == 0o700
        inject = ["fault", "inject", "blackhole", "--target", "all", "--name", name]
        owner = subprocess.run([*kp, *inject], capture_output=True, text=True, timeout=60)
        assert owner.returncode == 0, owner.stderr[-2000:]
        fault_id = owner.stdout.split(":")[0]
        theirs = as_outsider("-m", "kafkaproof", *inject, kafkaproof=True,
                             env={"KAFKAPROOF_STATE": os.environ["KAFKAPROOF_STATE"]})
        assert theirs.returncode != 0 and "is another user's: its state file" in theirs.stderr, theirs.stderr
        assert raw(sock, {"op": "clear"}) == {"connect_error": "Permission denied"}
        # the owner's processes are gone (the CLI exited): `down --all` heals through the recorded sockets
        down = subprocess.run([*kp, "cluster", "down", "--all"], capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr[-2000:]
        log = (Path(os.environ["KAFKAPROOF_STATE"]) / "clusters" / name / f"node-{st['nodes'][0]['id']}"
               / "proxy-events.jsonl").read_text().splitlines()
        removed = [json.loads(line) for line in log if '"rule_removed"' in line]
        assert [e["rule_id"] for e in removed] == [fault_id], log[-5:]
        assert not sock.exists()
    finally:
        if (Path(os.environ["KAFKAPROOF_STATE"]) / "clusters" / name / "state.json").exists():
            subprocess.run([sys.executable, "-m", "kafkaproof", "cluster", "down", "--name", name], timeout=60)
        fake.terminate()
        fake.wait(timeout=10)


FAKE_BROKER = """
import asyncio, sys
from kafkaproof.proxy.fake_broker import FakeCluster
async def main():
    cluster = FakeCluster({"t": 1})
    broker = cluster.add_broker(1)
    await broker.start()
    print(broker.address, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _uid() -> int:
    return int(subprocess.run(["id", "-u", OUTSIDER], capture_output=True, text=True, check=True).stdout)
