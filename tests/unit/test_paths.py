"""The base layer's file writing."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kafkaproof.paths import write_text_atomic

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
