"""Scenarios run with the Java client (`producers.client: java`, `consumers.client: java`): the runner
starts the Java driver instead of the Python workers and the same ledger comes out, exact to the value.
"""
from __future__ import annotations

import json
import uuid

import pytest
import yaml

from kafkaproof.errors import ScenarioError
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.run.client_config import client_config_problems
from kafkaproof.spec import ledger
from kafkaproof.spec.scenario import load

pytestmark = [pytest.mark.cluster, pytest.mark.java]


def scenario(tmp_path, **doc):
    doc = {"name": f"t-java-{uuid.uuid4().hex[:4]}", "guarantee": "at-least-once", **doc}
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load(path)


def test_java_clients_through_a_leader_kill_keep_every_acknowledged_value_exactly_once(tmp_path):
    scn = scenario(tmp_path, topic={"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
                   producers={"client": "java", "rate": 400, "messages": 2000, "start_after_s": 1,
                              "config": {"acks": "all", "delivery.timeout.ms": 60000, "max.block.ms": 10000}},
                   consumers={"client": "java", "count": 1, "commit": "sync"}, drain={"settle_s": 2},
                   # at 6 s: the producer's JVM starts sending 1-4 s in on a busy host; a kill before its first
                   # send left some sends waiting on metadata past the heal (a start-up race, not the kill's)
                   faults=[{"at": 6, "kind": "kill", "target": "leader:0", "duration": 3}])
    result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    work = result.run_dir / "work"
    assert (work / "producer-0.sends.tsv").exists() and list(work.glob("consumer-0-*.reads.tsv"))
    sends = ledger.read_table(result.run_dir, "sends").to_pandas()
    assert len(sends) == 2000 and sorted(sends["seq"]) == list(range(2000))
    assert set(sends["outcome"]) == {"ok"}, sends["outcome"].value_counts()  # idempotent by default (3.0+)
    audit = ledger.read_table(result.run_dir, "audit").to_pandas()
    log = audit[audit["isolation"] == "read_committed"]
    assert sorted(log["value_id"]) == sorted(sends["value_id"])  # every value once: nothing lost, no duplicate
    at = log.set_index("value_id")[["partition", "offset"]]
    assert (at.loc[sends["value_id"], "offset"].to_numpy() == sends["offset"].to_numpy()).all()
    reads = ledger.read_table(result.run_dir, "reads").to_pandas()
    assert set(reads["value_id"]) == set(sends["value_id"])
    events = ledger.read_table(result.run_dir, "consumer_events").to_pandas()
    assert {"start", "assign", "commit"} <= set(events["event"])
    manifest = ledger.read_manifest(result.run_dir)
    assert [p["client"] for p in manifest["clients"]["producers"]] == ["java"]
    assert manifest["clients"]["producers"][0]["idempotence"] is True
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["kind"] == "kill" and fault["heal_ns"]


def test_java_producer_without_idempotence_duplicates_the_writes_whose_ack_was_lost(tmp_path):
    # Five requests in flight (the default): a reset loses the answers pipelined behind the dropped one
    # too, and the answers written just before it that the client had not read yet, and the Java client
    # re-sends them all; the proxy reports what the broker wrote for each (issue 36.6).
    scn = scenario(tmp_path, topic={"partitions": 3, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
                   producers={"client": "java", "rate": 400, "messages": 1600, "start_after_s": 1,
                              "config": {"acks": "all", "enable.idempotence": False}},
                   consumers={"client": "java", "count": 1}, drain={"settle_s": 2},
                   # Active until the producers finish, not for a fixed window: a JVM slow to start may send
                   # its first record after such a window (seen: 3 s late), and the fault then never fires.
                   faults=[{"at": 2, "kind": "lost_ack", "target": "all",
                            "params": {"reset": True, "every": 20, "count": 2}}])
    result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    sends = ledger.read_table(result.run_dir, "sends").to_pandas()
    assert len(sends) == 1600 and set(sends["outcome"]) == {"ok"}
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["kind"] == "lost_ack" and fault["proxy_fired"] >= 1
    events = ledger.read_table(result.run_dir, "proxy_events").to_pandas()
    unacked = events[events["phase"].isin(["response_dropped", "response_discarded"])
                     & events["base_offsets"].notna()]
    audit = ledger.read_table(result.run_dir, "audit").to_pandas()
    log = audit[audit["isolation"] == "read_committed"]
    counts = log.groupby("value_id").size()
    at = log.set_index(["partition", "offset"])["value_id"]

    def values(rows):
        return {int(at[(p, o)]) for _, row in rows.iterrows()
                for p, base, n in zip(row["partitions"], row["base_offsets"], row["record_counts"])
                if base >= 0 for o in range(base, base + n)}

    lost_write_values = values(unacked)
    delivered = values(unacked[unacked["detail"].map(lambda d: json.loads(d).get("delivered") is True)])
    # Every duplicate is a write whose answer the client never had: dropped, lost with the reset
    # (before or after it came), or written just before the reset and not read by the client.
    duplicated = set(counts[counts > 1].index)
    assert duplicated and duplicated <= lost_write_values, \
        f"{len(duplicated - lost_write_values)} of {len(duplicated)} duplicates not reported by the proxy"
    # The other way round, a reported write is in the log once only when the client did read its
    # answer: one written before the reset (those are reported as possibly unread). A write whose answer
    # the client never had it re-sent (retries without end within delivery.timeout.ms; all sends ok).
    assert lost_write_values - duplicated <= delivered
    assert set(log["value_id"]) == set(sends["value_id"])  # and lost nothing


def test_client_properties_are_the_clients_own_names(tmp_path):
    rdkafka = scenario(tmp_path, producers={"config": {"max.block.ms": 1000, "linger.ms": 5}})
    assert client_config_problems(rdkafka.data) == [
        "producers.config.max.block.ms: librdkafka has no such property (the names of the Java client, e.g. "
        "max.block.ms, need producers.client: java)"]
    java = scenario(tmp_path, producers={"client": "java", "config": {"max.block.ms": 1000, "linger.ms": 5}},
                    consumers={"client": "java", "config": {"fetch.min.bytes": 1, "queued.min.messages": 10}})
    version = java.data["cluster"]["kafka_version"]
    assert client_config_problems(java.data) == [
        f"consumers.config.queued.min.messages: not a kafka-clients {version} consumer property "
        f"(ConsumerConfig.configNames() has no such name)"]
    with pytest.raises(ScenarioError, match=r"\.yaml: consumers\.config\.queued\.min\.messages"):
        resolve(java)  # refused before anything starts
    # names all known, but a combination kafka-clients refuses when it builds the client (the seeds'
    # delivery.timeout.ms 1000 with the 4.x default linger.ms 5): found before any cluster starts too
    combo = scenario(tmp_path, producers={"client": "java", "client_version": "4.3.1",
                                          "config": {"request.timeout.ms": 1000, "delivery.timeout.ms": 1000}})
    assert client_config_problems(combo.data) == [
        "producers.config: kafka-clients 4.3.1 refuses it: delivery.timeout.ms should be equal to or larger than "
        "linger.ms + request.timeout.ms"]
    assert client_config_problems(scenario(tmp_path, producers={
        "client": "java", "client_version": "3.9.2",
        "config": {"request.timeout.ms": 1000, "delivery.timeout.ms": 1000}}).data) == []  # linger.ms 0 in 3.x


@pytest.mark.long
def test_java_clients_on_an_existing_cluster_through_a_consumer_kill(make_cluster, tmp_path):
    existing = make_cluster(brokers=3).bootstrap_servers()
    scn = scenario(tmp_path, topic={"partitions": 2, "replication_factor": 3},
                   producers={"client": "java", "rate": 300, "messages": 1500, "start_after_s": 1},
                   consumers={"client": "java", "count": 1, "commit": "sync"}, drain={"settle_s": 2},
                   faults=[{"at": 3.5, "kind": "kill", "target": "consumer:0", "duration": 1}])
    result = ScenarioRun(resolve(scn, Overrides(bootstrap=existing)), RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    assert ledger.read_manifest(result.run_dir)["bootstrap"] == existing
    sends = ledger.read_table(result.run_dir, "sends").to_pandas()
    assert len(sends) == 1500 and set(sends["outcome"]) == {"ok"}
    audit = ledger.read_table(result.run_dir, "audit").to_pandas()
    assert sorted(audit[audit["isolation"] == "read_committed"]["value_id"]) == sorted(sends["value_id"])
    reads = ledger.read_table(result.run_dir, "reads").to_pandas()
    assert set(reads["value_id"]) == set(sends["value_id"]) and 1 in set(reads["incarnation"])
    assert len(list((result.run_dir / "work").glob("consumer-0-*.reads.tsv"))) == 2  # the killed driver and its successor
