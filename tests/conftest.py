"""Shared fixtures. Cluster tests start real Kafka brokers; they clean up even when a test fails."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    os.environ.setdefault("KAFKAPROOF_CACHE", str(REPO / ".cache"))
    os.environ.setdefault("KAFKAPROOF_STATE", str(REPO / ".state"))


# Markers whose tests run only when asked for with `-m`: too long for the `make test` budget.
ON_REQUEST = {
    "catalog": "long: run it with `pytest -m catalog` (see README, Tests)",
    "long": "over the 30-min budget of `make test`: run it with `make test-long` (`pytest -m long`)",
}


def pytest_collection_modifyitems(config, items):
    """Tests marked `catalog` or `long` run only when their marker is asked for (`pytest -m long`)."""
    asked = config.option.markexpr or ""
    for marker, reason in ON_REQUEST.items():
        if marker in asked:
            continue
        for item in items:
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def cluster_name(request) -> str:
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:24].strip("-")
    return f"t-{base}"


@pytest.fixture
def make_cluster(request):
    """Factory: start a LocalCluster with the given config; always torn down after the test."""
    from kafkaproof.cluster import ClusterConfig, LocalCluster
    started: list[LocalCluster] = []

    def make(**kwargs) -> LocalCluster:
        kwargs.setdefault("name", f"{cluster_name(request)}-{len(started)}")
        cfg = ClusterConfig(**kwargs)
        c = LocalCluster.up(cfg)
        started.append(c)
        return c

    yield make
    for c in started:  # the test has read what it needs: no controlled shutdown (~5 s per cluster)
        c.down(graceful=False)


