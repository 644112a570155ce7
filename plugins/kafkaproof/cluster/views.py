"""Kafka views every backend shares: addresses, metadata, partitions, leaders, topics.

Read through kafkaproof's own admin client, which never crosses a fault proxy
(`direct_bootstrap`), so a proxy fault never blinds the orchestrator.
"""
from __future__ import annotations

import logging
import random
import time
import uuid
from typing import Any, Callable, Collection, Mapping

from .. import logs
from ..errors import ClusterError, FaultError
from .state import ClusterState

log = logging.getLogger(__name__)

# Errors librdkafka raises without the request having been answered by a broker: it retired
# the broker handle the request was queued on (e.g. a bootstrap handle replaced by the broker
# it turned out to be), or the connection dropped. Safe to send an admin request again.
LOCAL_RETRIABLE_ERRORS = frozenset({"_DESTROY_BROKER", "_TRANSPORT"})
METADATA_TIMEOUT_S = 3.0
UNKNOWN_TOPIC_GRACE_S = 3.0  # how long a topic a broker does not know yet may take to appear


def kafka_error_name(exc: BaseException) -> str | None:
    """Pure: the KafkaError name carried by a confluent-kafka exception (e.g. `_DESTROY_BROKER`), else None."""
    err = exc.args[0] if exc.args else None
    return err.name() if hasattr(err, "name") and callable(err.name) else None


class KafkaViews:
    """Mixin of a cluster backend: what Kafka itself says."""

    _admin: Any = None
    _admin_bootstrap: str = ""
    # what the class it is mixed into provides (`capabilities.ClusterCore`)
    state: Callable[[], ClusterState]
    node_state: Callable[[int], str]

    # --- cluster-wide views ---------------------------------------------------
    def bootstrap_servers(self) -> str:
        """What clients use: the brokers' advertised CLIENT addresses (the proxies, with --proxy)."""
        return ",".join(n.advertised for n in self.state().broker_nodes)

    def direct_bootstrap(self, avoid: Collection[int] = ()) -> str:
        """Bootstrap that never crosses a fault proxy: the INTERNAL listeners with --proxy or a secured
        CLIENT listener, else the clients'.

        A client bootstrapped here gets INTERNAL addresses in metadata, so all its
        connections stay direct (and need no credentials: INTERNAL is plaintext).
        kafkaproof's admin client and the audit drain use it, with `direct_client_config()`.
        Nodes in `avoid` are left out unless that would leave none.
        """
        st = self.state()
        brokers = st.broker_nodes
        brokers = [n for n in brokers if n.id not in avoid] or brokers
        if not st.proxy and not st.client_config:
            return ",".join(n.advertised for n in brokers)
        return ",".join(f"{n.host}:{n.internal_port}" for n in brokers)

    def client_config(self) -> dict[str, Any]:
        """How clients connect at `bootstrap_servers()`: the secured listener's settings (empty: plaintext).

        Holds credentials: for clients only, never for a manifest (`spec.connection.redacted`).
        """
        return dict(self.state().client_config or {})

    def direct_client_config(self) -> dict[str, Any]:
        """How kafkaproof's own clients connect at `direct_bootstrap()`: the INTERNAL listener is plaintext."""
        return {}

    def isolated_nodes(self) -> set[int]:
        """Nodes an active `isolate` fault cuts off from everything, kafkaproof's own clients included."""
        return {n for f in self.state().faults if f.get("kind") == "isolate" for n in f.get("nodes", [])}

    def admin(self):
        """kafkaproof's admin client, bootstrapped only to brokers it can reach right now.

        A fault that resolves `leader:0` while the followers are isolated must not wait for a
        metadata request sent to an isolated node to time out: the fault would land seconds late.
        """
        from confluent_kafka.admin import AdminClient
        bootstrap = self.direct_bootstrap(avoid=self.isolated_nodes())
        if self._admin is None or self._admin_bootstrap != bootstrap:
            self._admin_bootstrap = bootstrap
            self._admin = AdminClient({**self.direct_client_config(), "bootstrap.servers": bootstrap,
                                       "socket.connection.setup.timeout.ms": 3000,
                                       "reconnect.backoff.max.ms": 1000,
                                       # Connection refusals while nodes start or are faulted are expected.
                                       "logger": logs.librdkafka_logger(), "log_level": 2})
        return self._admin

    def metadata(self, topic: str | None = None, timeout_s: float = METADATA_TIMEOUT_S, attempts: int = 3):
        """Cluster metadata from a live broker (confluent_kafka ClusterMetadata).

        librdkafka may send the request over a connection to a node that a fault
        silently cut off; on a timeout we retry with a fresh client, whose new
        connections only succeed to reachable brokers.
        """
        last: Exception | None = None
        for _ in range(attempts):
            try:
                return self.admin().list_topics(topic=topic, timeout=timeout_s)
            except Exception as e:  # KafkaException; the message is what matters
                last = e
                self._admin = None
        raise ClusterError(f"cannot read metadata from {self.direct_bootstrap()}: {last}") from last

    def registered_brokers(self) -> set[int]:
        return set(self.metadata().brokers)

    def partitions(self, topic: str, unknown_grace_s: float = UNKNOWN_TOPIC_GRACE_S) -> dict[int, dict]:
        """Per partition of `topic`: leader (-1 if none), replicas and ISR, from metadata.

        Each broker applies the metadata log at its own pace, so one that answers
        "unknown topic" for a topic another broker already serves is asked again for
        up to `unknown_grace_s` before the topic counts as missing.
        """
        deadline = time.monotonic() + unknown_grace_s
        while True:
            md = self.metadata(topic)
            t = md.topics.get(topic)
            if t is not None and (t.error is None or t.partitions):
                return {p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                        for p in t.partitions.values()}
            if time.monotonic() >= deadline:
                raise ClusterError(f"topic {topic!r} not found: {t.error if t else 'absent from metadata'}")
            time.sleep(0.2)

    def leader_of(self, topic: str, partition: int) -> int:
        parts = self.partitions(topic)
        if partition not in parts:
            raise FaultError(f"topic {topic!r} has no partition {partition} (partitions: {sorted(parts)})")
        leader = parts[partition]["leader"]
        if leader < 0:
            raise FaultError(f"{topic}-{partition} has no leader right now")
        return leader

    # --- topics ---------------------------------------------------------------
    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 30.0) -> None:
        """Create a topic and wait until every partition has a leader.

        A request librdkafka failed locally (see LOCAL_RETRIABLE_ERRORS) is sent again; on such a
        retry, "already exists" means the first attempt did reach the controller.
        """
        from confluent_kafka.admin import NewTopic
        cfg = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (config or {}).items()}
        give_up = time.monotonic() + timeout_s
        retried = False
        while True:
            fut = self.admin().create_topics([NewTopic(topic, num_partitions=partitions,
                                                       replication_factor=replication_factor, config=cfg)],
                                              request_timeout=timeout_s)[topic]
            try:
                fut.result(timeout=timeout_s)
                break
            except Exception as e:
                name = kafka_error_name(e)
                if retried and name == "TOPIC_ALREADY_EXISTS":
                    break
                if name in LOCAL_RETRIABLE_ERRORS and time.monotonic() < give_up:
                    log.info("creating topic %r: %s; asking again", topic, e)
                    retried = True
                    time.sleep(0.5)
                    continue
                raise ClusterError(f"creating topic {topic!r} (partitions={partitions}, RF={replication_factor}, "
                                   f"config={cfg}) failed: {e}") from e
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if len(parts) == partitions and all(p["leader"] >= 0 for p in parts.values()):
                    return
            except ClusterError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"topic {topic!r} has partitions without a leader after {timeout_s:.0f}s")

    def describe_topic(self, topic: str) -> dict:
        """Partitions (leader, replicas, ISR) and the non-default configs of a topic."""
        from confluent_kafka.admin import ConfigResource
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        deadline = time.monotonic() + 10
        while True:  # a broker may learn of a topic just created a moment after another one did
            try:
                cfg = self.admin().describe_configs([res])[res].result(timeout=10)
                break
            except Exception as e:
                transient = "UNKNOWN_TOPIC_OR_PART" in str(e) or kafka_error_name(e) in LOCAL_RETRIABLE_ERRORS
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        out = {"topic": topic, "partitions": self.partitions(topic),
               "config": {k: v.value for k, v in cfg.items() if not v.is_default}}
        topic_id = self.topic_id(topic)
        if topic_id is not None:
            out["topic_id"] = topic_id
        return out

    def topic_id(self, topic: str) -> str | None:
        """The topic's id (a UUID string), or None when the cluster does not say.

        Clients of Produce v13+ and Fetch v13+ name topics by id; a fault proxy that saw no
        Metadata answer naming the topic reports the id alone, and the run maps it back."""
        from confluent_kafka import KafkaException, TopicCollection
        try:
            desc = self.admin().describe_topics(TopicCollection([topic]))[topic].result(timeout=10)
        except (KafkaException, ValueError, TypeError) as e:  # an old broker, or a transient error
            log.debug("cannot describe topic %s for its id: %s", topic, e)
            return None
        tid = getattr(desc, "topic_id", None)
        if tid is None:
            return None
        mask = (1 << 64) - 1  # the bits come as signed longs; the proxy writes ids as canonical UUIDs
        return str(uuid.UUID(int=(tid.get_most_significant_bits() & mask) << 64
                             | (tid.get_least_significant_bits() & mask)))

    def wait_in_sync(self, topic: str, timeout_s: float = 60.0) -> None:
        """Wait until every partition's ISR holds all its replicas."""
        deadline = time.monotonic() + timeout_s
        parts: dict = {}
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if all(sorted(p["isr"]) == sorted(p["replicas"]) for p in parts.values()):
                    return
            except ClusterError:
                pass
            time.sleep(0.5)
        raise ClusterError(f"{topic}: replicas not all in sync after {timeout_s:.0f}s: {parts}")

    def followers(self, topic: str, partition: int) -> list[int]:
        """Every replica of the partition but its leader; raises FaultError when there is none."""
        p = self.partitions(topic).get(partition)
        if p is None:
            raise FaultError(f"topic {topic!r} has no partition {partition}")
        followers = [r for r in p["replicas"] if r != p["leader"]]
        if not followers:
            raise FaultError(f"{topic}-{partition} has no follower (replicas {p['replicas']})")
        return followers

    def random_follower(self, topic: str, partition: int, rng: random.Random | None = None) -> int:
        followers = self.followers(topic, partition)
        live = [r for r in followers if self.node_state(r) == "running"]
        return (rng or random).choice(live or followers)  # a second fault on "a follower" should hit another one

    def topics_status(self) -> tuple[dict[str, dict], str | None]:
        """Per topic and partition: leader, replicas, ISR — and why not, if metadata cannot be read."""
        topics: dict[str, dict] = {}
        try:
            md = self.metadata(timeout_s=3.0)
        except ClusterError as e:
            return topics, str(e)
        for tname, t in sorted(md.topics.items()):
            topics[tname] = {str(p.id): {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                             for p in sorted(t.partitions.values(), key=lambda p: p.id)}
        return topics, None
