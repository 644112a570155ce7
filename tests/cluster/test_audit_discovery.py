"""Audit discovery on a real cluster: it reads topics, settings and groups, and changes nothing.

A 3-broker cluster (started as the other cluster tests start theirs) gets a topic auto-created by a
producer (broker defaults: 1 partition, RF 1), an RF 3 / min ISR 2 topic, a compacted topic and a
consumer group with a live member. `kafkaproof audit --discover-only --json` reads them; the cluster's
describe outputs (topics, every topic and broker config with its source, groups and their offsets)
are byte-for-byte the same before and after.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kafkaproof import cli
from kafkaproof.spec.inventory import ClusterInventory
from support import audit_topics, describe_everything

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

SPRING_YML = """\
spring:
  kafka:
    bootstrap-servers: {bootstrap}
    producer:
      acks: 1
      retries: 0
    consumer:
      group-id: billing
      listener-thing: x
"""


def test_discovery_reads_topics_settings_groups_and_changes_nothing(make_cluster, tmp_path, capsys):
    cluster = make_cluster(brokers=3, broker_config={"auto.create.topics.enable": "true",
                                                       "default.replication.factor": 1, "num.partitions": 1})
    bootstrap = cluster.bootstrap_servers()
    suffix = uuid.uuid4().hex[:6]
    auto, safe, compacted = f"auto-{suffix}", f"safe-{suffix}", f"compacted-{suffix}"
    audit_topics(cluster, auto, safe, compacted)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"billing-{suffix}", "client.id": "billing-app",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([safe])
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.5)
    assert consumer.assignment(), "the consumer got no assignment"
    consumer.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spring = tmp_path / "application.yml"
    spring.write_text(SPRING_YML.format(bootstrap=bootstrap))
    try:
        before = describe_everything(admin)
        t0 = time.monotonic()
        assert cli.main(["audit", "--app-config", str(spring), "--discover-only", "--json"]) == 0
        took = time.monotonic() - t0
        after = describe_everything(admin)
    finally:
        consumer.close()
    out = json.loads(capsys.readouterr().out)
    print(f"discovery took {took:.1f} s")
    inv = ClusterInventory.from_dict(out["inventory"])
    assert before == after, "the audit changed the cluster"

    assert len(inv.nodes) == 3 and all(n.roles == ("broker", "controller") for n in inv.nodes)
    assert inv.kafka_release == ".".join(cluster.state().kafka_version.split(".")[:2]), inv.notes
    assert inv.metadata_version and inv.metadata_version.startswith(inv.kafka_release), inv.metadata_version
    assert inv.broker_config["auto.create.topics.enable"] == "true"
    assert inv.broker_config["default.replication.factor"] == "1"
    assert inv.broker_config_differs == {}
    a, s, c = inv.topic(auto), inv.topic(safe), inv.topic(compacted)
    # `auto` has the broker defaults: 1 partition, RF 1 and the brokers' min.insync.replicas (2 on kafkaproof's
    # local clusters: with RF 1, acks=all writes to it are refused)
    assert (a.partitions, a.replication_factor, a.overrides) == (1, 1, ())
    assert a.min_insync_replicas == int(inv.broker_config["min.insync.replicas"])
    assert (s.partitions, s.replication_factor, s.min_insync_replicas, s.overrides) == (3, 3, 2, ("min.insync.replicas",))
    assert c.config["cleanup.policy"] == "compact" and s.config["cleanup.policy"] == "delete"
    assert inv.topic("__consumer_offsets").internal
    group = next(g for g in inv.groups if g.group_id == f"billing-{suffix}")
    assert group.protocol == "classic" and group.assignor and group.topics == (safe,)
    assert [m.client_id for m in group.members] == ["billing-app"]
    settings = out["client_settings"]
    assert settings["producer"] == {"acks": "1", "retries": 0} and settings["bootstrap"] == bootstrap
    assert [u["key"] for u in settings["unknown"]] == ["spring.kafka.consumer.listener-thing"]
