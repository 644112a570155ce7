"""The audit drain with an application's decoder, on a real one-broker Kafka: records are drained into AUDIT
rows by identity (foreign and malformed ones as -1, counted), the default path still reads kafkaproof's
payloads, and an output topic's records become READS rows."""
from __future__ import annotations

import json
import time

import pytest

from kafkaproof.run.app_ledger import value_id_of
from kafkaproof.run.drain import drain
from kafkaproof.run.processed import reads_from_topic
from kafkaproof.spec.application import parse_identity
from kafkaproof.spec.ledger import encode_payload

pytestmark = pytest.mark.cluster

INDEX = {f"u-{i}": 1000 + i for i in range(20)}


def write(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list | None]],
          partitions: int = 2) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2})
    failed: list[str] = []
    for i, (key, value, headers) in enumerate(records):
        producer.produce(topic, key=key, value=value, headers=headers, partition=i % partitions,
                         on_delivery=lambda err, msg: failed.append(err.name()) if err else None)
    deadline = time.monotonic() + 60
    while len(producer) and time.monotonic() < deadline:
        producer.flush(1)
    assert not len(producer) and not failed, failed


def test_an_applications_records_are_drained_by_identity(make_cluster):
    cluster = make_cluster(brokers=1, broker_config={"offsets.topic.replication.factor": 1})
    cluster.create_topic("signups", partitions=2, replication_factor=1)
    cluster.create_topic("processed", partitions=1, replication_factor=1)
    bootstrap = cluster.bootstrap_servers()
    records = [(f"u-{i}".encode(), json.dumps({"id": f"u-{i}", "email": "x@example.com"}).encode(),
                [("event-id", f"u-{i}".encode())]) for i in range(6)]
    records += [(b"u-2", json.dumps({"id": "u-2"}).encode(), None),   # a duplicate of u-2
                (b"z", json.dumps({"id": "someone-else"}).encode(), None),  # foreign id
                (None, b"not json", None),                               # malformed
                (None, encode_payload("r1", 7, 20), None)]               # kafkaproof's own payload
    write(bootstrap, "signups", records)

    decoder = value_id_of(parse_identity({"json_pointer": "/id"}, "t"), INDEX)
    rows, marks = drain(bootstrap, "signups", "read_committed", 60, decoder=decoder)
    assert all(m["complete"] for m in marks.values()) and len(rows) == len(records)
    ids = sorted(r["value_id"] for r in rows)
    assert ids == [-1, -1, -1, 1000, 1001, 1002, 1002, 1003, 1004, 1005]
    counts = decoder.counts.as_dict()
    assert (counts["matched"], counts["foreign"], counts["unreadable"]) == (7, 1, 2)
    assert {r["isolation"] for r in rows} == {"read_committed"}

    # By header: only the first six carry one.
    by_header = value_id_of(parse_identity({"header": "event-id"}, "t"), INDEX)
    rows, _ = drain(bootstrap, "signups", "read_uncommitted", 60, decoder=by_header)
    assert sorted(r["value_id"] for r in rows if r["value_id"] >= 0) == [1000, 1001, 1002, 1003, 1004, 1005]
    assert by_header.counts.unreadable == 4

    # Without a decoder the drain reads kafkaproof's payloads as before.
    rows, _ = drain(bootstrap, "signups", "read_committed", 60)
    assert sorted(r["value_id"] for r in rows) == [-1] * 9 + [7]

    # An output topic: what the application wrote after processing, as READS rows.
    write(bootstrap, "processed", [(None, json.dumps({"id": f"u-{i}"}).encode(), None) for i in (3, 1, 3)], partitions=1)
    table, marks = reads_from_topic(bootstrap, "processed", value_id_of(parse_identity({"json_pointer": "/id"}, "t"),
                                                                         INDEX), timeout_s=60)
    reads = table.to_pylist()
    assert [r["value_id"] for r in reads] == [1003, 1001, 1003] and marks[0]["complete"]
    assert {(r["partition"], r["offset"]) for r in reads} == {(None, None)}
    assert all(r["read_ns"] > 0 for r in reads)
