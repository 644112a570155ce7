"""Discovery: read what decides a team's cluster's reliability into a `ClusterInventory`, read-only.

The audit's first step (docs/audit.md). It uses the admin clients kafkaproof already uses for existing
clusters: confluent-kafka's AdminClient (describe_cluster, list_topics for all topics at once — asking
for one topic by name could auto-create it —, describe_configs, list/describe_consumer_groups) and, for
the Kafka release, Kafka's own `kafka-features describe` from the installed Kafka jars (the protocol
names no software version; the newest metadata.version the brokers support names their release line).
Every call is a Describe or List: nothing is created, altered or deleted on the cluster, and no fault
is injected. A refused call fails with the call and the ACL it needs.
"""
from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from typing import Any, Mapping, Sequence

from .. import logs
from ..errors import ClusterError, InstallError
from ..spec.connection import java_properties, security_protocol
from ..spec.inventory import (BROKER_KEYS, ROLE_KEYS, TOPIC_KEYS, ClusterInventory, GroupInfo, GroupMember, NodeInfo,
                              TopicInfo, differing, parse_feature_describe, release_of_metadata_version, roles_of,
                              select_topics)
from ..spec.versions import DEFAULT_KAFKA_VERSION
from .external import discover_brokers
from .install import ensure_kafka

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 15.0
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")  # Kafka's Topic.INTERNAL_TOPICS
AUTHORIZATION_ERRORS = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")


def _result(future, call: str, needs: str, where: str):
    """The result of one admin call; ClusterError naming the call, and the ACL when it was refused."""
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S + 5)
    except Exception as e:  # KafkaException carries a KafkaError; a timeout is concurrent's
        err = e.args[0] if getattr(e, "args", None) else None
        name = err.name() if hasattr(err, "name") else ""
        if name in AUTHORIZATION_ERRORS:
            raise ClusterError(f"{call} on {where} was refused ({name}): the audit needs {needs}") from None
        raise ClusterError(f"{call} on {where} failed: {e}") from None


def topic_info(name: str, md_topic, entries: Mapping[str, Any], internal: bool) -> TopicInfo:
    """Pure: a TopicInfo from a topic's metadata and its ConfigEntry objects."""
    parts = [md_topic.partitions[p] for p in sorted(md_topic.partitions)]
    config = {k: (entries[k].value if k in entries else None) for k in TOPIC_KEYS}
    overrides = tuple(sorted(k for k in TOPIC_KEYS if k in entries and _set_on_topic(entries[k])))
    return TopicInfo(name=name, internal=internal, partitions=len(parts),
                     replication_factor=max((len(p.replicas) for p in parts), default=0), config=config,
                     overrides=overrides, replicas=tuple(tuple(p.replicas) for p in parts),
                     under_replicated=sum(1 for p in parts if len(p.isrs) < len(p.replicas)),
                     offline=sum(1 for p in parts if p.leader < 0))


def _set_on_topic(entry) -> bool:
    from confluent_kafka.admin import ConfigSource
    return entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def group_info(desc) -> GroupInfo:
    """Pure: a GroupInfo from a ConsumerGroupDescription."""
    members = tuple(GroupMember(client_id=m.client_id, host=m.host, group_instance_id=m.group_instance_id,
                                topics=tuple(sorted({tp.topic for tp in (m.assignment.topic_partitions or [])})))
                    for m in desc.members)
    protocol = getattr(getattr(desc, "type", None), "name", "UNKNOWN").lower()
    state = getattr(desc.state, "name", str(desc.state))
    return GroupInfo(group_id=desc.group_id, protocol=protocol, state=state, assignor=desc.partition_assignor or None,
                     simple=bool(desc.is_simple_consumer_group), members=members)


def kafka_features(bootstrap: str, client_config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """`kafka-features describe` of the cluster (read-only), run with the installed Kafka jars; the
    connection config goes in a private temporary file (it may hold credentials), removed afterwards."""
    dist = ensure_kafka(DEFAULT_KAFKA_VERSION)
    fd, path = tempfile.mkstemp(prefix="kp-audit-", suffix=".properties")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in java_properties(client_config).items()))
        cmd = dist.java_command("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bootstrap,
                                "--command-config", path, "describe", heap="128m")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    features = parse_feature_describe(proc.stdout)
    if proc.returncode != 0 or not features:
        raise ClusterError(f"kafka-features describe failed ({proc.returncode}): "
                           f"{(proc.stdout + proc.stderr).strip()[-600:]}")
    return features


def discover(bootstrap: str, client_config: Mapping[str, Any] | None = None, topics: Sequence[str] = (),
             timeout_s: float = 30.0, features: bool = True) -> ClusterInventory:
    """The inventory of the cluster at `bootstrap` (connecting with `client_config`, librdkafka names),
    limited to the topics matching `topics` (names or globs; none: all). Read-only."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    client_config = dict(client_config or {})
    discover_brokers(bootstrap, timeout_s, client_config)  # reachable, credentials accepted: else a clear error
    where = f"the cluster at {bootstrap} ({security_protocol(client_config)})"
    admin = AdminClient({**client_config, "bootstrap.servers": bootstrap,
                         "logger": logs.librdkafka_logger(), "log_level": 2})
    notes: list[str] = []
    cluster = _result(admin.describe_cluster(request_timeout=REQUEST_TIMEOUT_S), "DescribeCluster",
                      "Describe on the CLUSTER resource", where)
    try:
        md = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    except Exception as e:  # KafkaException: the message says what failed
        raise ClusterError(f"Metadata (all topics) on {where} failed: {e}") from None
    brokers = sorted(cluster.nodes, key=lambda n: n.id)
    configs: dict = {}
    for n in brokers:  # one broker resource per call: each is answered by that broker
        configs.update(_describe_configs(admin, [ConfigResource(ResourceType.BROKER, str(n.id))],
                                         f"DescribeConfigs (broker {n.id})", "DescribeConfigs on the CLUSTER resource",
                                         where))
    by_broker = {int(r.name): {k: (e.value if e is not None else None)
                               for k in BROKER_KEYS + ROLE_KEYS for e in [entries.get(k)]}
                 for r, entries in configs.items()}
    first = by_broker[brokers[0].id] if brokers else {}
    names = select_topics(list(md.topics), topics)
    if topics and not names:
        notes.append(f"no topic matches --topics {','.join(topics)}")
    topic_configs = _describe_configs(admin, [ConfigResource(ResourceType.TOPIC, t) for t in names],
                                      "DescribeConfigs (topics)", "DescribeConfigs on each TOPIC", where)
    topic_entries = {r.name: entries for r, entries in topic_configs.items()}
    topic_list = tuple(topic_info(t, md.topics[t], topic_entries.get(t, {}), t in INTERNAL_TOPICS) for t in names)
    groups = _groups(admin, where)
    release = metadata_version = None
    if features:
        try:
            found = kafka_features(bootstrap, client_config)
            mv = found.get("metadata.version", {})
            release = release_of_metadata_version(mv.get("SupportedMaxVersion"))
            metadata_version = mv.get("FinalizedVersionLevel")
            if release is None:
                notes.append(f"kafka-features describe named no metadata.version (features: {found})")
        except (ClusterError, InstallError, OSError, subprocess.TimeoutExpired) as e:
            notes.append(f"the Kafka release could not be read (kafka-features describe): {e}")
    quorum = first.get("controller.quorum.voters") or first.get("controller.quorum.bootstrap.servers")
    return ClusterInventory(
        bootstrap=bootstrap, cluster_id=cluster.cluster_id, kafka_release=release, metadata_version=metadata_version,
        controller_id=None if cluster.controller is None else int(cluster.controller.id), controller_quorum=quorum,
        nodes=tuple(NodeInfo(id=n.id, host=n.host, port=n.port, rack=n.rack,
                             roles=roles_of(by_broker.get(n.id, {}).get("process.roles"))) for n in brokers),
        broker_config={k: first.get(k) for k in BROKER_KEYS},
        broker_config_differs=differing(by_broker, BROKER_KEYS), topics=topic_list, groups=groups,
        notes=tuple(notes), discovered_wall=time.time(), topic_filter=tuple(topics))


def _describe_configs(admin, resources: list, call: str, needs: str, where: str) -> dict:
    """{resource: {name: ConfigEntry}} for `resources` (none: {})."""
    if not resources:
        return {}
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    return {r: _result(f, call, needs, where) for r, f in futures.items()}


def _groups(admin, where: str) -> tuple[GroupInfo, ...]:
    """Every consumer group, described (protocol, state, assignor, members)."""
    listed = _result(admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "ListGroups",
                     "Describe on the CLUSTER resource (or on each group)", where)
    ids = sorted(g.group_id for g in listed.valid)
    if not ids:
        return ()
    futures = admin.describe_consumer_groups(ids, request_timeout=REQUEST_TIMEOUT_S)
    return tuple(group_info(_result(futures[g], f"DescribeGroups ({g})", f"Describe on GROUP {g}", where))
                 for g in ids)
