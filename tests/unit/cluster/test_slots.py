"""The host-wide slot registry: two state directories never get one slot, a gone cluster's slot is reused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaproof.cluster import slots
from kafkaproof.errors import ClusterError

pytestmark = pytest.mark.unit


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "slots"
    monkeypatch.setenv(slots.SLOTS_ENV, str(d))
    return d


def start(state_root: Path, name: str, avoid: set[int] = frozenset()) -> int:
    """What a cluster start does: claim a slot and write the state file naming it, under the lock."""
    state_file = state_root / "clusters" / name / "state.json"
    with slots.locked() as d:
        slot = slots.claim(d, state_file, name, range(1, 251), set(avoid))
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"name": name, "slot": slot}))
    return slot


def test_two_state_directories_get_different_slots_and_a_gone_clusters_slot_is_reused(registry, tmp_path):
    a, b = tmp_path / "state-a", tmp_path / "state-b"
    assert start(a, "default") == 1
    assert start(b, "default") == 2  # the same name in another state directory
    assert start(a, "other", avoid={3}) == 4  # a slot a route or namespace uses is skipped
    assert slots.taken_slots() == {1, 2, 4}
    assert slots.claimed_by_others(2, a) and not slots.claimed_by_others(1, a) and not slots.claimed_by_others(9, a)
    (a / "clusters" / "default" / "state.json").unlink()  # down (or a start that failed) without a release
    assert slots.taken_slots() == {2, 4} and not slots.claimed_by_others(1, b)
    assert start(b, "again") == 1
    slots.release(4, b / "clusters" / "other" / "state.json")  # not b's claim: it stays
    assert slots.taken_slots() == {1, 2, 4}
    slots.release(4, a / "clusters" / "other" / "state.json")
    assert slots.taken_slots() == {1, 2}


def test_a_state_file_naming_another_slot_frees_the_claim(registry, tmp_path):
    slot = start(tmp_path / "s", "c")
    state_file = tmp_path / "s" / "clusters" / "c" / "state.json"
    state_file.write_text(json.dumps({"slot": slot + 5}))  # the name started again elsewhere, without the registry
    assert slot not in slots.taken_slots()


# Separate interpreters, not a fork of this (threaded) pytest process: a fork can inherit a lock another
# thread held and hang until the suite's timeout.
_CLAIM = """
import json, sys
from pathlib import Path
from kafkaproof.cluster import slots
state_file = Path(sys.argv[1]) / "clusters" / "default" / "state.json"
with slots.locked() as d:
    slot = slots.claim(d, state_file, "default", range(1, 251), set())
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps({"name": "default", "slot": slot}))
print(slot)
"""


def test_concurrent_starts_of_many_state_directories_never_share_a_slot(registry, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIM, str(tmp_path / f"state-{i}")], env=env,
                              stdout=subprocess.PIPE, text=True) for i in range(8)]
    got = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert sorted(got) == list(range(1, 9))


def test_no_free_slot_is_an_error_naming_the_registry(registry, tmp_path):
    with pytest.raises(ClusterError, match="no free cluster slot on this host"):
        with slots.locked() as d:
            slots.claim(d, tmp_path / "state.json", "c", range(1, 3), {1, 2})


def test_a_registry_that_is_a_link_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "elsewhere"
    real.mkdir()
    link = tmp_path / "slots"
    link.symlink_to(real)
    monkeypatch.setenv(slots.SLOTS_ENV, str(link))
    with pytest.raises(ClusterError, match="is a link or another user's directory"):
        with slots.locked():
            pass


def test_the_registry_is_shared_by_every_user(registry):
    with slots.locked():
        pass
    assert os.stat(registry).st_mode & 0o1777 == 0o1777
    assert os.stat(registry / ".lock").st_mode & 0o666 == 0o666
