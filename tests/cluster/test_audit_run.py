"""The whole audit on a real cluster kafkaproof did not provision for it: verdicts per topic, the fix proven.

A 3-broker cluster with Kafka's defaults for what an auto-created topic gets (RF 1, min ISR 1) holds a topic
auto-created by a producer (the E6 incident), an RF 3 / min ISR 2 topic and a compacted RF 3 topic; the
team's Spring application.yml has the seeds' E1 producer settings. `kafkaproof audit --faults leader-outage
--max-classes 2` (the compacted topic joins the RF 3 class) runs the two classes on replicas: the RF 1 class
fails (events not delivered while its only broker is down), the RF 3 / min ISR 2 class passes, RF 3 + min ISR 2
is proven as the RF 1 class's fix, and the team's cluster is byte-for-byte unchanged.

`long`: three replica runs (the matrix's two, one fix) and two analyses, ~300 s.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from kafkaproof import cli
from support import audit_topics, describe_everything

pytestmark = [pytest.mark.cluster, pytest.mark.long, pytest.mark.timeout(900)]

# The seeds' E1 producer (../shared/seed-experiments.md), as a Spring application.yml gives it, plus a
# delivery timeout of 20 s (the Java default, 120 s, would make the leader-outage runs 130 s each).
SPRING_YML = """\
spring:
  kafka:
    bootstrap-servers: {bootstrap}
    producer:
      acks: all
      retries: 3
      properties:
        request.timeout.ms: 1500
        max.block.ms: 1500
        reconnect.backoff.ms: 500
        reconnect.backoff.max.ms: 2000
        retry.backoff.ms: 500
        metadata.max.age.ms: 30000
        delivery.timeout.ms: 20000
    consumer:
      group-id: my-group
      auto-offset-reset: earliest
"""


def test_audit_flags_the_rf1_topic_passes_the_rf3_one_and_proves_the_fix(make_cluster, tmp_path, capsys):
    cluster = make_cluster(brokers=3, broker_config={"auto.create.topics.enable": "true", "min.insync.replicas": 1,
                                                       "default.replication.factor": 1, "num.partitions": 1})
    bootstrap = cluster.bootstrap_servers()
    suffix = uuid.uuid4().hex[:6]
    # names in class order: the auto-created and the RF 3 / min ISR 2 classes are kept, the compacted one joins
    auto, safe, compacted = f"a-orders-{suffix}", f"b-payments-{suffix}", f"c-profiles-{suffix}"
    audit_topics(cluster, auto, safe, compacted)
    spring = tmp_path / "application.yml"
    spring.write_text(SPRING_YML.format(bootstrap=bootstrap))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = tmp_path / "audit"
    before = describe_everything(admin)
    t0 = time.monotonic()
    code = cli.main(["audit", "--bootstrap", bootstrap, "--spring-config", str(spring), "--out", str(out),
                     "--faults", "leader-outage", "--max-classes", "2"])
    took = time.monotonic() - t0
    after = describe_everything(admin)
    printed = capsys.readouterr().out
    print(printed)
    print(f"audit took {took:.0f} s")
    assert before == after, "the audit changed the cluster"

    doc = json.loads((out / "audit.json").read_text())
    assert code == 1 and doc["verdict"] == "fail", (printed, doc["errors"])
    rf1, rf3 = doc["classes"]
    assert rf1["topics"] == [auto] and rf1["settings"]["auto_created"] and rf1["settings"]["replication_factor"] == 1
    assert rf3["topics"] == [safe, compacted] and rf3["grouped"][0]["topic"] == compacted
    (outage,) = rf1["runs"]
    assert rf1["verdict"] == "fail" and outage["status"] == "failed", outage
    assert outage["counts"].get("undelivered_attempts", 0) > 0 and "lost" not in outage["counts"], outage
    assert outage["first_wall"]["undelivered_attempts"] > doc["started_wall"]
    assert (out / outage["report"]).exists()
    assert rf3["verdict"] == "pass", rf3["runs"]
    assert rf1["fix"] and rf1["fix"]["fixes"] == ["rf3", "min-isr-2"], rf1["fixes_tried"]
    assert [t["outcome"] for t in rf1["fixes_tried"]] == ["passed"]
    assert f"{auto}" in printed and "FAIL" in printed and "undelivered_attempts" in printed
    assert "proven fix for rf1-isr1-auto" in printed and f"report: {out / 'audit.html'}" in printed
    assert (out / "audit.html").exists() and (out / "suite" / "audit-plan.json").exists()
