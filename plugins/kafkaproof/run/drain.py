"""The audit drain: after the faults healed, a fresh reader reads every partition to its high watermark."""
from __future__ import annotations

import re
import time
import uuid
from typing import Any, Callable, Mapping

from ..errors import ClusterError
from ..spec import ledger

# (key, value, headers) -> value id, -1 for a record that is not one of the run's values.
Decoder = Callable[[bytes | None, bytes | None, list[tuple[str, bytes]] | None], int]


def drain(bootstrap: str, topic: str, isolation: str, timeout_s: float,
          connection: Mapping[str, Any] | None = None,
          decoder: Decoder | None = None) -> tuple[list[dict], dict[int, dict]]:
    """Read every partition of `topic` from the beginning to its high watermark with a fresh reader
    (connecting with `connection`, the cluster's security settings). Each record's value id is
    kafkaproof's payload (`ledger.decode_value_id`), or what `decoder` gives for its key, value and
    headers (an application's records, by identity: `app_ledger.value_id_of`)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({**(connection or {}), "bootstrap.servers": bootstrap, "group.id": f"kp-audit-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "log_level": 3,
                         "enable.partition.eof": False})
    try:
        md = consumer.list_topics(topic, timeout=15)
        if topic not in md.topics or not md.topics[topic].partitions:
            raise ClusterError(f"drain: topic {topic!r} not found")
        partitions = sorted(md.topics[topic].partitions)
        marks: dict[int, dict] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            marks[p] = {"low": low, "high": high, "complete": high <= low, "read": 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        rows: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(m["complete"] for m in marks.values()):
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    continue
                key = m.key()
                value_id = (ledger.decode_value_id(m.value()) if decoder is None
                            else decoder(key, m.value(), m.headers()))
                rows.append({"isolation": isolation, "partition": m.partition(), "offset": m.offset(),
                             "key": key.decode(errors="replace") if key is not None else None,
                             "value_id": value_id, "timestamp_ms": m.timestamp()[1]})
                marks[m.partition()]["read"] += 1
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            for tp in positions:
                if tp.offset >= 0 and tp.offset >= marks[tp.partition]["high"]:
                    marks[tp.partition]["complete"] = True
        return rows, marks
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, connection: Mapping[str, Any] | None = None,
                    timeout_s: float = 15) -> dict[int, int]:
    """High watermark of every partition of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**(connection or {}), "bootstrap.servers": bootstrap, "group.id": f"kp-marks-{uuid.uuid4().hex[:8]}",
                         "log_level": 3})
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else []
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)[1]
                for p in parts}
    finally:
        consumer.close()


def committed_offsets(admin, group: str, topic: str, timeout_s: float = 5) -> dict[int, int]:
    """The offsets `group` has committed on `topic`, per partition, as the group coordinator has them,
    asked with `admin` (a confluent_kafka AdminClient); partitions without a commit are left out, an
    error reads as nothing committed yet."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    try:
        request = [ConsumerGroupTopicPartitions(group)]
        result = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group].result()
    except KafkaException:
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions
            if tp.topic == topic and tp.error is None and tp.offset >= 0}


CLIENT_ID = re.compile(r"^kp-consumer-(\d+)-(\d+)$")  # what run.workers names each consumer incarnation


def describe_group(admin, group: str, timeout_s: float = 10) -> dict[str, Any]:
    """What the group coordinator says of `group`, asked with `admin` (a confluent_kafka AdminClient): its type
    (`classic` or `consumer`: the protocol the group runs, KIP-848), state, assignor and members (client id,
    the consumer and incarnation it names, partitions); `{"group", "error"}` when it cannot be described."""
    from confluent_kafka import KafkaException
    from ..cluster.discovery import group_info
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout=timeout_s + 5)
    except (KafkaException, TimeoutError) as e:  # concurrent's TimeoutError on 3.11
        return {"group": group, "error": str(e)}
    info = group_info(desc)
    members = []
    for m in desc.members:
        match = CLIENT_ID.match(m.client_id or "")
        members.append({"client_id": m.client_id, "consumer": int(match.group(1)) if match else None,
                        "incarnation": int(match.group(2)) if match else None,
                        "partitions": sorted(tp.partition for tp in (m.assignment.topic_partitions or []))})
    return {"group": group, "type": info.protocol, "state": info.state.lower(), "assignor": info.assignor,
            "members": sorted(members, key=lambda m: (m["consumer"] is None, m["consumer"] or 0, m["client_id"]))}


def audit_summary(marks_by_isolation: dict[str, dict]) -> dict:
    """Pure: the manifest's `audit` section: per partition low/high watermark and whether both drains reached high."""
    partitions: dict[str, dict] = {}
    for iso, marks in marks_by_isolation.items():
        for p, m in marks.items():
            entry = partitions.setdefault(str(p), {"low": m["low"], "high": m["high"], "complete": True})
            entry["high"] = max(entry["high"], m["high"])
            entry["complete"] = entry["complete"] and m["complete"]
            entry[f"read_{iso}"] = m["read"]
    return {"partitions": partitions, "isolations": sorted(marks_by_isolation)}
