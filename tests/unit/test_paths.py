"""The base layer's file writing and file lock."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kafkaproof.paths import PACKAGE_DIR, file_lock, write_text_atomic

pytestmark = pytest.mark.unit


def test_concurrent_writers_of_one_file_never_move_each_others_temp_file(tmp_path):
    # Four Java drivers started at once used to share one temp name: one os.replace found it gone.
    path = tmp_path / "logging" / "config.properties"
    texts = [f"writer {i}\n" * 200 for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda t: [write_text_atomic(path, t) for _ in range(50)], texts))
    assert path.read_text() in texts
    assert [p.name for p in path.parent.iterdir()] == ["config.properties"]


def test_written_files_are_readable_by_all_and_private_ones_by_their_owner_only(tmp_path, monkeypatch):
    """Reports and manifests may be published by a web server of another user; a cluster's state file
    holds a secured cluster's password."""
    from kafkaproof.cluster import state
    assert write_text_atomic(tmp_path / "index.html", "<html/>").stat().st_mode & 0o777 == 0o644
    assert write_text_atomic(tmp_path / "secret", "pw", private=True).stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))
    state.save_state("mode-check", state.ClusterState.from_json({"name": "mode-check", "client": {"sasl.password": "pw"}}))
    assert state.state_path("mode-check").stat().st_mode & 0o777 == 0o600
    assert state.load_state("mode-check").extra["client"] == {"sasl.password": "pw"}


HOLD_THE_LOCK = """
import sys
from pathlib import Path
from kafkaproof.paths import file_lock
with file_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_a_file_lock_makes_the_second_holder_wait_for_the_first_process(tmp_path):
    path = tmp_path / "made" / ".lock"  # neither the file nor its directory exists yet
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_DIR.parent)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline() == "locked\n" and path.is_file()
        taken = threading.Event()

        def take() -> None:
            with file_lock(path):
                taken.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        assert not taken.wait(0.5)  # the other process holds it: this one waits
        holder.communicate("\n", timeout=10)  # the holder leaves its block
        assert taken.wait(10)
        waiter.join(10)
    finally:
        holder.kill()
        holder.wait()


def test_a_file_lock_is_released_by_an_exception_and_for_every_user_never_follows_a_link(tmp_path):
    path = tmp_path / ".lock"
    with pytest.raises(ValueError):
        with file_lock(path):
            raise ValueError("in the block")
    again = threading.Event()

    def take_again() -> None:
        with file_lock(path):
            again.set()

    threading.Thread(target=take_again, daemon=True).start()
    assert again.wait(5)  # free again: a lock left held would block this thread
    shared = tmp_path / "shared.lock"
    with file_lock(shared, every_user=True):
        assert shared.stat().st_mode & 0o777 == 0o666
    (tmp_path / "link.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        with file_lock(tmp_path / "link.lock", every_user=True):
            pass
    assert not (tmp_path / "elsewhere").exists()
