"""What an audit reads from a team's cluster: one explicit, serialisable type (`ClusterInventory`).

Discovery (cluster.discovery) fills it from the cluster, read-only; the audit's later steps (grouping
topics into reliability classes, building replica scenarios) read only this, so an inventory written as
JSON can be audited again without the cluster. It holds what decides reliability and nothing else:
the Kafka release, the nodes and their roles, the broker settings of `BROKER_KEYS`, every topic's
partitions, replication factor and `TOPIC_KEYS` settings, and the consumer groups with their protocol,
assignment strategy and members' client ids.

Pure: no I/O.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

# Broker settings that decide what a broker outage does to a topic (docs/audit.md says why each matters).
BROKER_KEYS = ("auto.create.topics.enable", "default.replication.factor", "min.insync.replicas",
               "unclean.leader.election.enable", "num.partitions", "offsets.topic.replication.factor",
               "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
               "log.flush.interval.messages", "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
               "log.retention.ms", "log.retention.hours", "log.cleanup.policy")
# Read to tell the nodes' roles and the controller quorum, not audited themselves.
ROLE_KEYS = ("process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers")
TOPIC_KEYS = ("min.insync.replicas", "unclean.leader.election.enable", "retention.ms", "retention.bytes",
              "cleanup.policy", "flush.messages", "flush.ms")


@dataclass(frozen=True)
class NodeInfo:
    """A broker the cluster reports, with the roles its `process.roles` names (None: not readable)."""

    id: int
    host: str
    port: int
    rack: str | None = None
    roles: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TopicInfo:
    """A topic as discovered: its shape, its reliability settings and which of them were set on the topic
    itself (`overrides`; the rest it inherits from the brokers, as an auto-created topic does)."""

    name: str
    internal: bool
    partitions: int
    replication_factor: int
    config: dict[str, str | None]
    overrides: tuple[str, ...]
    replicas: tuple[tuple[int, ...], ...]  # per partition, in partition order
    under_replicated: int  # partitions whose ISR is smaller than their replicas
    offline: int  # partitions without a leader

    @property
    def min_insync_replicas(self) -> int | None:
        return _int(self.config.get("min.insync.replicas"))

    @property
    def unclean_leader_election(self) -> bool | None:
        value = self.config.get("unclean.leader.election.enable")
        return None if value is None else str(value).lower() == "true"


@dataclass(frozen=True)
class GroupMember:
    """A member of a consumer group: who it is (client id, host) and what it was given."""

    client_id: str
    host: str
    group_instance_id: str | None = None
    topics: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group: `protocol` classic or consumer (KIP-848), `assignor` the assignment strategy in use."""

    group_id: str
    protocol: str
    state: str
    assignor: str | None
    simple: bool
    members: tuple[GroupMember, ...] = ()

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({t for m in self.members for t in m.topics}))


@dataclass(frozen=True)
class ClusterInventory:
    """Everything an audit reads from a cluster. `kafka_release` is the newest release line the brokers'
    software supports (`metadata.version`'s SupportedMaxVersion), `metadata_version` the finalised level;
    `broker_config` is the first broker's, `broker_config_differs` names keys whose value differs by broker."""

    bootstrap: str
    cluster_id: str | None
    kafka_release: str | None
    metadata_version: str | None
    controller_id: int | None
    controller_quorum: str | None
    nodes: tuple[NodeInfo, ...]
    broker_config: dict[str, str | None]
    broker_config_differs: dict[str, dict[int, str | None]]
    topics: tuple[TopicInfo, ...]
    groups: tuple[GroupInfo, ...]
    notes: tuple[str, ...] = ()
    discovered_wall: float | None = None
    topic_filter: tuple[str, ...] = field(default=())

    def topic(self, name: str) -> TopicInfo:
        """The topic named `name`; KeyError naming the topics there are."""
        for t in self.topics:
            if t.name == name:
                return t
        raise KeyError(f"no topic {name!r} in the inventory; topics: {', '.join(t.name for t in self.topics)}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples as lists, broker ids as strings in `broker_config_differs`)."""
        data = asdict(self)
        data["broker_config_differs"] = {k: {str(n): v for n, v in by.items()}
                                         for k, by in self.broker_config_differs.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ClusterInventory":
        """The inventory `to_dict` wrote (also after a JSON round trip)."""
        nodes = tuple(NodeInfo(id=int(n["id"]), host=n["host"], port=int(n["port"]), rack=n.get("rack"),
                               roles=None if n.get("roles") is None else tuple(n["roles"])) for n in data["nodes"])
        topics = tuple(TopicInfo(name=t["name"], internal=bool(t["internal"]), partitions=int(t["partitions"]),
                                 replication_factor=int(t["replication_factor"]), config=dict(t["config"]),
                                 overrides=tuple(t["overrides"]), replicas=tuple(tuple(r) for r in t["replicas"]),
                                 under_replicated=int(t["under_replicated"]), offline=int(t["offline"]))
                       for t in data["topics"])
        groups = tuple(GroupInfo(group_id=g["group_id"], protocol=g["protocol"], state=g["state"],
                                 assignor=g.get("assignor"), simple=bool(g["simple"]),
                                 members=tuple(GroupMember(client_id=m["client_id"], host=m["host"],
                                                           group_instance_id=m.get("group_instance_id"),
                                                           topics=tuple(m.get("topics") or ()))
                                               for m in g.get("members") or ()))
                       for g in data["groups"])
        return cls(bootstrap=data["bootstrap"], cluster_id=data.get("cluster_id"),
                   kafka_release=data.get("kafka_release"), metadata_version=data.get("metadata_version"),
                   controller_id=data.get("controller_id"), controller_quorum=data.get("controller_quorum"),
                   nodes=nodes, broker_config=dict(data["broker_config"]),
                   broker_config_differs={k: {int(n): v for n, v in by.items()}
                                          for k, by in (data.get("broker_config_differs") or {}).items()},
                   topics=topics, groups=groups, notes=tuple(data.get("notes") or ()),
                   discovered_wall=data.get("discovered_wall"), topic_filter=tuple(data.get("topic_filter") or ()))


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def select_topics(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Pure: the topics matching any of `patterns` (names or shell globs; none: every topic), sorted."""
    if not patterns:
        return sorted(names)
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns))


def roles_of(process_roles: str | None) -> tuple[str, ...] | None:
    """Pure: `process.roles` (`broker,controller`) as a sorted tuple; None when not readable (ZooKeeper mode
    or no permission)."""
    if not process_roles:
        return None
    return tuple(sorted(r.strip() for r in process_roles.split(",") if r.strip()))


def differing(configs: Mapping[int, Mapping[str, str | None]], keys: tuple[str, ...]) -> dict[str, dict[int, str | None]]:
    """Pure: the keys whose value is not the same on every broker, with each broker's value."""
    out = {}
    for key in keys:
        values = {node: cfg.get(key) for node, cfg in configs.items()}
        if len(set(values.values())) > 1:
            out[key] = dict(sorted(values.items()))
    return out


def release_of_metadata_version(level: str | None) -> str | None:
    """Pure: the release line a metadata.version names (`4.1-IV1` -> `4.1`)."""
    return level.split("-")[0] if level else None


_FEATURE_FIELD = re.compile(r"\b(Feature|SupportedMinVersion|SupportedMaxVersion|FinalizedVersionLevel|Epoch):\s*(\S+)")


def parse_feature_describe(text: str) -> dict[str, dict[str, str]]:
    """Pure: `kafka-features describe` output by feature name: `Feature: name  Key: value ...` lines, the
    fields separated by tabs (Kafka 3.x) or padded with spaces (4.3); other lines (logging) are skipped."""
    features: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(_FEATURE_FIELD.findall(line))
        if line.startswith("Feature:") and "Feature" in fields:
            features[fields.pop("Feature")] = fields
    return features


def inventory_text(inv: ClusterInventory) -> str:
    """Pure: the inventory as a readable report: cluster, broker settings, one line per topic and group."""
    lines = [f"cluster {inv.cluster_id} at {inv.bootstrap}: Kafka {inv.kafka_release or '?'} "
             f"(metadata.version {inv.metadata_version or '?'}), controller {inv.controller_id}",
             "nodes: " + ", ".join(f"{n.id} {n.host}:{n.port} ({'+'.join(n.roles) if n.roles else '?'})"
                                   for n in inv.nodes)]
    if inv.controller_quorum:
        lines.append(f"controller quorum: {inv.controller_quorum}")
    lines.append("broker settings:")
    lines += [f"  {k} = {inv.broker_config.get(k)}" + (f"  (differs by broker: {inv.broker_config_differs[k]})"
                                                       if k in inv.broker_config_differs else "")
              for k in BROKER_KEYS if k in inv.broker_config]
    header = ("topic", "partitions", "RF", "min ISR", "unclean", "retention.ms", "cleanup", "set on topic")
    rows = [(t.name + (" (internal)" if t.internal else ""), str(t.partitions), str(t.replication_factor),
             str(t.min_insync_replicas), str(t.unclean_leader_election).lower(), str(t.config.get("retention.ms")),
             str(t.config.get("cleanup.policy")), ",".join(t.overrides) or "-") for t in inv.topics]
    lines += ["topics:"] + _table(header, rows)
    grows = [(g.group_id, g.protocol, g.state, g.assignor or "-", ",".join(sorted({m.client_id for m in g.members}))
              or "-", ",".join(g.topics) or "-") for g in inv.groups]
    lines += ["consumer groups:"] + (_table(("group", "protocol", "state", "assignor", "client ids", "topics"), grows)
                                     if grows else ["  (none)"])
    lines += [f"note: {n}" for n in inv.notes]
    return "\n".join(lines)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
