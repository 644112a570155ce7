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
