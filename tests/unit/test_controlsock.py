"""Control channels only for their owner: the pure parts (refusals, socket paths, tokens) and a proxy's
control server on a Unix socket and on a TCP port asked for explicitly (no cluster, no second user:
tests/cluster/test_control_owner.py has those)."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kafkaproof import controlsock
from kafkaproof.controlsock import ControlRefused
from kafkaproof.proxy import ControlClient, FaultProxy
from kafkaproof.proxy.control import ControlServer
from kafkaproof.proxy.errors import ControlError, ProxyError

pytestmark = pytest.mark.unit


def test_only_the_owner_is_accepted_and_the_refusal_names_both_users():
    assert controlsock.refusal(0, 0) is None and controlsock.refusal(1234, 1234) is None
    message = controlsock.refusal(65534, 0)
    assert message == "this control socket accepts only its owner root (uid 0); the connecting process runs as " \
                      "nobody (uid 65534)"
    assert controlsock.user_label(2_000_000_123) == "uid 2000000123"


def test_sockets_go_under_the_state_directory_unless_its_path_is_too_long(tmp_path):
    short = Path("/home/ci/.local/state/kafkaproof")
    assert controlsock.socket_dir_for(short, 1000) == short / "sockets"
    deep = Path("/srv/" + "x" * 80)
    fallback = controlsock.socket_dir_for(deep, 1000)
    assert fallback.parent in (Path("/run/user/1000"), Path("/tmp")) and fallback.name.startswith("kafkaproof-1000-")
    assert fallback != controlsock.socket_dir_for(Path("/srv/" + "y" * 80), 1000)  # one per state directory
    name = controlsock.socket_name("a-very-long-cluster-name-of-a-nightly-batch-proxy-3")
    assert len(name) == controlsock.MAX_NAME + len(".sock") and name.startswith("a-very-long")
    assert controlsock.socket_name("c1-proxy-2") == "c1-proxy-2.sock"
    for state in (short, deep):
        assert len(str(controlsock.socket_dir_for(state, 1000) / name)) <= controlsock.MAX_SOCKET_PATH


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path (pytest's own are too deep for a socket under them)."""
    path = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_socket_directory_is_private_and_must_be_ours(short_tmp, monkeypatch):
    tmp_path = short_tmp
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "s"))
    loose = tmp_path / "s" / "sockets"
    loose.mkdir(parents=True, mode=0o777)
    os.chmod(loose, 0o777)
    path = controlsock.socket_path("x")
    assert path.parent == loose and (loose.stat().st_mode & 0o777) == 0o700
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(ControlRefused, match="symlink"):
        controlsock.private_dir(link)


def test_a_token_file_must_be_private(tmp_path):
    path = tmp_path / "token"
    token = controlsock.write_token(path)
    assert len(token) == 64 and (path.stat().st_mode & 0o777) == 0o600 and controlsock.read_token(path) == token
    os.chmod(path, 0o644)
    with pytest.raises(ControlRefused, match="mode 0600"):
        controlsock.read_token(path)
    assert controlsock.token_matches(token, token) and not controlsock.token_matches("x", token)
    assert not controlsock.token_matches(None, token)
    assert controlsock.unix_path("unix:/a/b") == "/a/b" and controlsock.unix_path("/a") == "/a"
    assert controlsock.unix_path("127.0.0.1:1") is None


def test_a_proxy_control_socket_is_0600_and_a_tcp_port_needs_the_token(tmp_path):
    async def scenario() -> None:
        proxy = FaultProxy(["1@127.0.0.1:0=127.0.0.1:9"])
        await proxy.start()
        with pytest.raises(ProxyError, match="needs a secret token"):
            ControlServer(proxy, "127.0.0.1:0")
        unix = ControlServer(proxy, f"unix:{tmp_path}/c.sock")
        token = controlsock.write_token(tmp_path / "token")
        tcp = ControlServer(proxy, "127.0.0.1:0", token=token)
        await unix.start()
        await tcp.start()
        assert (os.stat(tmp_path / "c.sock").st_mode & 0o777) == 0o600

        def drive() -> None:
            client = ControlClient(unix.address)
            assert client.call("ping")["pid"] == os.getpid()
            client.close()
            without = ControlClient(tcp.address)
            with pytest.raises(ControlError, match="needs its cluster's secret token"):
                without.call("ping")
            without.close()
            wrong = ControlClient(tcp.address, token="0" * 64)
            with pytest.raises(ControlError, match="secret token"):
                wrong.add_rule({"action": "blackhole"})
            wrong.close()
            right = ControlClient(tcp.address, token=token)
            assert right.add_rule({"action": "blackhole"}) == "r1"
            right.close()

        await asyncio.to_thread(drive)
        await unix.stop()
        await tcp.stop()
        await proxy.stop()
        assert not (tmp_path / "c.sock").exists()
    asyncio.run(scenario())


def test_a_peer_of_our_own_uid_passes_the_credentials_check():
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        assert controlsock.peer_uid(a) == os.geteuid() and controlsock.peer_refusal(a) is None
    finally:
        a.close()
        b.close()


def test_a_proxy_under_a_state_directory_too_deep_for_a_socket_path_listens_in_the_short_fallback(tmp_path):
    import json
    import subprocess
    import sys
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    env = {**os.environ, "KAFKAPROOF_STATE": str(deep)}
    proc = subprocess.Popen([sys.executable, "-m", "kafkaproof.proxy", "--listen", "1@127.0.0.1:0=127.0.0.1:9",
                             "--exit-with-parent"], stdout=subprocess.PIPE, env=env)
    try:
        ready = json.loads(proc.stdout.readline())
        path = Path(controlsock.unix_path(ready["control"]))
        assert len(str(path).encode()) <= controlsock.MAX_SOCKET_PATH and not str(path).startswith(str(deep))
        assert path.parent == controlsock.fallback_socket_dir(deep, os.geteuid())
        assert path.parent.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o777 == 0o600
        client = ControlClient(ready["control"])
        assert client.call("ping")["pid"] == proc.pid
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
    assert not path.exists()  # a proxy that stops removes its socket
    path.parent.rmdir()
