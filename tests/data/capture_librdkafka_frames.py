"""Record the Kafka protocol frames a real librdkafka producer sends (and the answers it gets).

    PYTHONPATH=plugins .venv/bin/python tests/data/capture_librdkafka_frames.py

Writes tests/data/librdkafka-frames.json: per capture, the producer config, how
many records it produced, and every frame (hex, with its 4-byte length prefix)
each fake broker received or sent, in order. tests/test_proxy.py parses these
recordings offline (framing, headers, correlation, Produce targets and record
counts), so the proxy's parser is checked against what a real client writes.
The fake brokers (kafkaproof.proxy.fake_broker) answer with kio-encoded responses.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import confluent_kafka

from kafkaproof.proxy.fake_broker import FakeCluster

OUT = Path(__file__).with_name("librdkafka-frames.json")
RECORDS = 40
CAPTURES = {
    # one batch per partition per request, plain and idempotent, uncompressed and lz4
    "plain": {"acks": "all", "enable.idempotence": False, "linger.ms": 20, "compression.type": "none"},
    "idempotent-lz4": {"acks": "all", "enable.idempotence": True, "linger.ms": 20, "compression.type": "lz4"},
}


def produce(bootstrap: str, config: dict) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": "kafkaproof-capture",
                                         "message.timeout.ms": 10000, **config})
    for i in range(RECORDS):
        producer.produce("t", value=f"value-{i}".encode(), key=str(i).encode())
    assert producer.flush(20) == 0


async def capture(config: dict) -> dict:
    cluster = FakeCluster({"t": 3})
    brokers = [cluster.add_broker(node_id, record_frames=True) for node_id in (1, 2)]
    for broker in brokers:
        await broker.start()
    try:
        await asyncio.to_thread(produce, f"127.0.0.1:{brokers[0].port}", config)
    finally:
        for broker in brokers:
            await broker.stop()
    return {"config": config, "records": RECORDS, "records_written": cluster.records_written("t"),
            "brokers": [{"node_id": b.node_id, "requests": [f.hex() for f in b.frames_in],
                         "responses": [f.hex() for f in b.frames_out]} for b in brokers]}


def main() -> None:
    out = {"client": f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}",
           "captures": {name: asyncio.run(capture(config)) for name, config in CAPTURES.items()}}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
