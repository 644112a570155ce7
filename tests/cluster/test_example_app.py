"""The example application (`examples/signup-app/`, a user's Spring Boot services) built with real Maven and
run as black-box processes against a real local Kafka: every accepted sign-up is processed, poison
sign-ups go where the error handler sends them, and with the topic's only broker stopped the
answer-after-ack service refuses (503) while the answer-before-ack service accepts (202) sign-ups
that never reach Kafka.

Marked `long`: the first build downloads Spring Boot into ~/.m2 and each service takes ~10 s to start.
"""
from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

from kafkaproof.run import example_app

from support import free_port, stop_group, wait_for

pytestmark = [pytest.mark.long, pytest.mark.cluster]

log = logging.getLogger(__name__)

TOPIC = "signups"
READY_TIMEOUT_S = 120
BROKER_ONE = {"offsets.topic.replication.factor": 1}


@pytest.fixture(scope="module")
def jars() -> dict[str, Path]:
    started = time.monotonic()
    built = example_app.build()
    log.info("example application ready in %.1f s: %s", time.monotonic() - started,
             {name: f"{jar.stat().st_size / 1e6:.1f} MB" for name, jar in built.items()})
    return built


def http(method: str, url: str, body: dict | None = None, timeout_s: float = 30) -> tuple[int, object]:
    """One request: (status, parsed JSON body or the raw text); an error status is an answer, not an exception."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


class Service:
    """One service of the example as a subprocess on a free port; its output in `log_path`."""

    def __init__(self, stack: ExitStack, jar: Path, log_path: Path, **properties: object) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = example_app.command(jar, {"server.port": self.port, "server.address": "127.0.0.1", **properties})
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        stack.callback(stop_group, self.proc, 20)

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.log_path.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                return http("GET", f"{self.url}/actuator/health", timeout_s=2)[0] == 200
            except OSError:
                return False
        wait_for(ready, READY_TIMEOUT_S, f"{self.log_path.name} to answer /actuator/health")
        assert " started: port=" in self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_count(self, text: str) -> int:
        return self.log_path.read_text(errors="replace").count(text)


def read_ids(bootstrap: str, topic: str, timeout_s: float = 60) -> list[str]:
    """The `id` of every record of `topic` (all partitions, from the start to the end offsets now)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-read-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 2})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p) for p in meta.partitions]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        ids: list[str] = []
        pos = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout_s
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None or msg.error():
                continue
            ids.append(json.loads(msg.value())["id"])
            pos[msg.partition()] = msg.offset() + 1
        assert all(pos[p] >= ends[p] for p in ends), f"read {pos} of {ends} within {timeout_s}s"
        return ids
    finally:
        consumer.close()


def ids_when_readable(bootstrap: str, topic: str, at_least: int = 0) -> list[str] | None:
    """`read_ids`, or None while the topic cannot be read yet (a broker starting) or has fewer ids."""
    from confluent_kafka import KafkaException
    try:
        ids = read_ids(bootstrap, topic, timeout_s=20)
    except (KafkaException, KeyError, AssertionError) as e:
        log.info("%s not readable yet: %s", topic, e)
        return None
    return ids if len(ids) >= at_least and ids else None


def test_every_accepted_signup_is_processed_and_poison_ones_follow_the_error_handler(jars, make_cluster, tmp_path):
    cluster = make_cluster(brokers=1, broker_config=BROKER_ONE)
    cluster.create_topic(TOPIC, partitions=3, replication_factor=1)
    bootstrap = cluster.bootstrap_servers()
    kafka = {"spring.kafka.bootstrap-servers": bootstrap}
    with ExitStack() as stack:
        service = Service(stack, jars["signup-service"], tmp_path / "signup-service.log", **kafka,
                          **{"signup.topic": TOPIC, "signup.answer": "after-ack"})
        common = {**kafka, "processor.topic": TOPIC, "processor.poison-pattern": "^poison-",
                  "processor.retry.attempts": 1, "processor.retry.interval": "100ms"}
        # Two consumer groups read the same sign-ups, each with one of the listener's shapes and error handlers.
        dead_letter = Service(stack, jars["signup-processor"], tmp_path / "processor-dlt.log", **common,
                              **{"spring.kafka.consumer.group-id": "dlt", "spring.kafka.listener.ack-mode":
                                 "MANUAL_IMMEDIATE", "processor.error-handler": "dead-letter"})
        skip = Service(stack, jars["signup-processor"], tmp_path / "processor-skip.log", **common,
                       **{"spring.kafka.consumer.group-id": "skip", "spring.kafka.listener.ack-mode": "RECORD",
                          "processor.error-handler": "skip"})
        for s in (service, dead_letter, skip):
            s.wait_ready()

        ids = [f"user-{i:03d}" for i in range(50)]
        poison = ["poison-1", "poison-2"]
        for i, signup_id in enumerate(ids[:25] + poison + ids[25:]):
            status, body = http("POST", f"{service.url}/signups", {"id": signup_id, "email": f"{signup_id}@x.test"})
            assert status == 200, (signup_id, status, body)
            assert body["id"] == signup_id and body["offset"] >= 0
        assert http("POST", f"{service.url}/signups", {"email": "no-id@x.test"})[0] == 400

        for processor in (dead_letter, skip):
            done = wait_for(lambda: (lambda got: got if len(got) >= len(ids) else None)(
                http("GET", f"{processor.url}/processed")[1]), 90, f"{processor.log_path.name} to process 50")
            assert sorted(done) == ids, processor.tail()  # each once, no poison one
            records = http("GET", f"{processor.url}/processed/records")[1]
            assert [r["id"] for r in records] == done and {r["topic"] for r in records} == {TOPIC}
            # Per partition, processing order is offset order.
            for p in {r["partition"] for r in records}:
                offsets = [r["offset"] for r in records if r["partition"] == p]
                assert offsets == sorted(offsets)
        assert sorted(wait_for(lambda: ids_when_readable(bootstrap, f"{TOPIC}.DLT", 2), 60, "2 dead letters")) == poison
        wait_for(lambda: skip.log_count("skipped after 1 retries") >= 2, 30, "2 skipped poison sign-ups")
        assert skip.log_count("skipped after 1 retries") == 2
        assert skip.log_count("retries: java.lang.IllegalStateException: poison sign-up poison-") == 2


def test_broker_down_after_ack_answers_503_before_ack_accepts_lost_signups(jars, make_cluster, tmp_path):
    cluster = make_cluster(brokers=1, broker_config=BROKER_ONE)
    cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
    bootstrap = cluster.bootstrap_servers()
    # Fail fast: a record nobody acknowledges expires after 6 s; the after-ack answer waits up to 20 s.
    producer = {"spring.kafka.bootstrap-servers": bootstrap, "signup.topic": TOPIC, "signup.ack-timeout": "20s",
                "spring.kafka.producer.properties.delivery.timeout.ms": 6000,
                "spring.kafka.producer.properties.request.timeout.ms": 3000,
                "spring.kafka.producer.properties.max.block.ms": 5000}
    with ExitStack() as stack:
        after = Service(stack, jars["signup-service"], tmp_path / "after-ack.log", **producer,
                        **{"signup.answer": "after-ack"})
        before = Service(stack, jars["signup-service"], tmp_path / "before-ack.log", **producer,
                         **{"signup.answer": "before-ack"})
        after.wait_ready()
        before.wait_ready()
        healthy = [f"ok-{name}-{i}" for name in ("after", "before") for i in range(5)]
        for signup_id in healthy:
            url = after.url if "after" in signup_id else before.url
            assert http("POST", f"{url}/signups", {"id": signup_id})[0] in (200, 202)

        cluster.stop_node(1)
        lost_after = [f"down-after-{i}" for i in range(3)]
        for signup_id in lost_after:
            started = time.monotonic()
            status, body = http("POST", f"{after.url}/signups", {"id": signup_id}, timeout_s=40)
            took = time.monotonic() - started
            assert status == 503 and body["id"] == signup_id, (status, body)
            assert "Expiring" in body["error"] or "Timeout" in body["error"], body
            assert took < 20, f"503 after {took:.1f}s"
            log.info("after-ack answered 503 in %.1f s: %s", took, body.get("error"))
        lost_before = [f"down-before-{i}" for i in range(5)]
        for signup_id in lost_before:
            started = time.monotonic()
            assert http("POST", f"{before.url}/signups", {"id": signup_id})[0] == 202
            assert time.monotonic() - started < 5
        wait_for(lambda: before.log_count("was accepted but its send failed") >= len(lost_before), 60,
                 "the before-ack service's sends to expire")

        cluster.start_node(1)
        cluster.wait_ready(timeout_s=120)
        in_kafka = wait_for(lambda: ids_when_readable(bootstrap, TOPIC), 90, "the topic to be readable")
        assert sorted(in_kafka) == sorted(healthy), "202-accepted sign-ups never reached Kafka; 503 ones neither"
