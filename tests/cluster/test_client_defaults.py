"""The client-default diff of a client upgrade, computed from two real kafka-clients jars (the Java driver's
`defaults` mode, one JVM per version; no cluster). The first test that needs the driver jar builds it."""
from __future__ import annotations

import time

import pytest

from kafkaproof.run import java_driver
from kafkaproof.spec.client_upgrade import NO_DEFAULT, default_changes, scenario_set
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION

pytestmark = pytest.mark.java


@pytest.fixture(scope="module")
def jars() -> tuple[dict, dict, float]:
    java_driver.build()
    t0 = time.monotonic()
    old = java_driver.read_client_defaults(PRODUCTION_KAFKA_VERSION)
    new = java_driver.read_client_defaults(DEFAULT_KAFKA_VERSION)
    return old, new, time.monotonic() - t0


def test_each_jar_declares_its_own_defaults(jars):
    old, new, took = jars
    assert (old["version"], new["version"]) == (PRODUCTION_KAFKA_VERSION, DEFAULT_KAFKA_VERSION)
    for doc, version in ((old, PRODUCTION_KAFKA_VERSION), (new, DEFAULT_KAFKA_VERSION)):
        for role in ("producer", "consumer"):
            assert set(doc[role]) == java_driver.config_names(role, version)  # every property, nothing else
        assert doc["producer"]["acks"]["default"] == "all"
        assert doc["consumer"]["key.deserializer"] == {"type": "CLASS"}
    assert old["producer"]["bootstrap.servers"] == {"type": "LIST", "default": ""}  # 3.x: an empty list
    assert new["producer"]["bootstrap.servers"] == {"type": "LIST"}  # 4.x: none, it must be given
    assert took < 20, took


def test_the_diff_from_the_production_to_the_default_version(jars):
    old, new, _ = jars
    d = default_changes(old, new)
    changed = {(c.role, c.name): (c.current, c.candidate) for c in d.changed}
    assert changed[("producer", "linger.ms")] == ("0", "5")  # KIP-1030, 4.0
    assert ("producer", "acks") not in changed
    assert changed[("producer", "metadata.recovery.strategy")] == ("none", "rebootstrap")
    assert changed[("admin", "enable.metrics.push")] == ("true", "false")
    assert d.only_count > 0  # properties only one of the two versions has (e.g. 3.x's removed ones)
    assert all(c.current != c.candidate for c in d.changed)
    # a scenario that sets linger.ms itself is not told its default changed
    set_here = default_changes(old, new, scenario_set({"producers": {"config": {"linger.ms": 0}}}))
    assert ("producer", "linger.ms") not in {(c.role, c.name) for c in set_here.changed}
    assert ("producer", "linger.ms") in {(c.role, c.name) for c in set_here.set_here}
    assert NO_DEFAULT not in {c.current for c in d.changed if c.name == "linger.ms"}


def test_client_defaults_are_cached_per_driver_build_and_version(jars):
    old, _, _ = jars
    assert java_driver.client_defaults(PRODUCTION_KAFKA_VERSION) == old
    t0 = time.monotonic()
    assert java_driver.client_defaults(PRODUCTION_KAFKA_VERSION) == old
    assert time.monotonic() - t0 < 1.0  # from the cache, no JVM
