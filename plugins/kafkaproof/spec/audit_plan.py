"""An audit's plan: the team's topics in reliability classes, each class a suite of replica scenarios.

From what discovery read (`ClusterInventory`) and the team's client settings (`ClientSettings`, or None:
the client's defaults), `plan_audit` groups the topics into reliability classes: topics with the same
settings that decide what a broker outage does to them (`CLASS_KEYS`: replication factor, min ISR, unclean
election, cleanup policy, flush overrides, and whether the topic looks auto-created). Internal topics are
left out and named. With more classes than `max_classes`, the smallest classes are grouped into the kept
class they differ from least, and the plan says which topics went where and which settings differed.

`class_scenarios` turns a class into one scenario document per fault of the fixed matrix (`FAULTS`), on
a replica of the cluster (release, node count, the broker settings of `REPLICA_BROKER_KEYS`), with the
team's producer and consumer settings and the delivery claim. One fault per scenario, so a verdict says
which fault lost what, and a fault that did not take effect makes only its own run an error.

`fix_candidates` (spec.audit_fixes) gives the changes to try when a class fails.

Pure: no I/O except `write_suite` (writes the scenario files of a plan into one directory).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..errors import ScenarioError
from .client_settings import ClientSettings
from .clients import CONSUMER_OWNED, PRODUCER_OWNED
from .inventory import ClusterInventory, TopicInfo
from .scenario import MAX_BROKERS, validate_document
from .versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION, check_version

# Topic settings that make two topics one reliability class (effective values; flush only when set on the topic).
CLASS_KEYS = ("replication_factor", "min.insync.replicas", "unclean.leader.election.enable", "cleanup.policy",
              "flush.messages", "flush.ms", "auto_created")
# Broker settings the replica cluster takes over from the team's (what an outage does, what an auto-created
# topic gets); retention and cleanup defaults are left out: a run lasts minutes.
REPLICA_BROKER_KEYS = ("auto.create.topics.enable", "default.replication.factor", "min.insync.replicas",
                       "unclean.leader.election.enable", "num.partitions", "offsets.topic.replication.factor",
                       "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                       "log.flush.interval.messages", "log.flush.interval.ms")
# Client properties the replica's clients do not take over, and why (the scenario sets its own).
DROPPED_CLIENT_KEYS = {
    "key.serializer": "kafkaproof's clients write their own records", "value.serializer": "kafkaproof's clients "
    "write their own records", "key.deserializer": "kafkaproof's clients read their own records",
    "value.deserializer": "kafkaproof's clients read their own records",
    "interceptor.classes": "the team's classes are not on the replica's classpath",
    "client.id": "kafkaproof names its clients", "auto.offset.reset": "kafkaproof's consumers read every value "
    "from the start of the topic", "partitioner.class": "the team's classes are not on the replica's classpath"}
# Consumer properties a scenario field owns that the replica takes over through that field.
MAPPED_CONSUMER_KEYS = ("group.id", "isolation.level", "enable.auto.commit")
# The fixed fault matrix: id (in file names) -> what it does. Order is the order of the files.
FAULTS = {"leader-kill": "the partition leader's broker killed (SIGKILL) for 10 s",
          "leader-outage": "the partition leader's broker stopped for longer than the producer's delivery.timeout.ms",
          "isolate": "the partition leader's broker cut off the network for 10 s",
          "lost-ack": "the answers to Produce requests dropped after the broker wrote them (fault proxy), 5 s",
          "rolling-restart": "every broker restarted in turn (graceful), each back in its ISRs before the next",
          "power-loss": "the partition leader's broker loses power: killed, its unsynced writes dropped"}
FAULT_AT_S = 6.0
SHORT_FAULT_S = 10.0
OUTAGE_MARGIN_S = 10.0
TAIL_S = 12.0  # the producer keeps sending this long after the last heal
RATE = 100
DELIVERY_WITHIN_S = 60.0
DEFAULT_DELIVERY_TIMEOUT_MS = {"java": 120000, "librdkafka": 300000}


@dataclass(frozen=True)
class GroupedTopic:
    """A topic of a class whose own settings differ from the class's (`--max-classes`): what it had."""

    topic: str
    from_class: str
    differs: dict[str, Any]  # setting -> the topic's own value (the class runs with its own)


@dataclass(frozen=True)
class ReliabilityClass:
    """Topics with the same reliability settings (`settings`, by `CLASS_KEYS`), run as one replica suite.

    `label` names it in scenario and file names; `topic` is the one the replica scenarios produce to (the
    first member); `partitions` the replica topic's count (the smallest member's, at most 3)."""

    label: str
    settings: dict[str, Any]
    topics: tuple[str, ...]
    partitions: int
    grouped: tuple[GroupedTopic, ...] = ()

    @property
    def topic(self) -> str:
        return self.topics[0]


@dataclass(frozen=True)
class AuditPlan:
    """What an audit runs: the replica cluster, the team's clients and the classes; `excluded` topics (internal)
    with why, `notes` on what the replica could not copy."""

    bootstrap: str
    cluster_id: str | None
    discovered_wall: float | None
    kafka_version: str
    brokers: int
    controllers: int
    broker_config: dict[str, Any]
    client: str
    producer: dict[str, Any]
    consumer: dict[str, Any]
    transactions: bool
    classes: tuple[ReliabilityClass, ...]
    excluded: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    max_classes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


# --- classes -------------------------------------------------------------------------------------

def looks_auto_created(topic: TopicInfo, broker_config: Mapping[str, Any]) -> bool:
    """Pure: whether a topic has what an auto-created one gets: brokers allow auto-creation, nothing set on the
    topic, and the brokers' default partitions and replication factor (Kafka records no creator)."""
    if str(broker_config.get("auto.create.topics.enable", "true")).lower() != "true" or topic.overrides:
        return False
    return (str(topic.partitions) == str(broker_config.get("num.partitions", "1"))
            and str(topic.replication_factor) == str(broker_config.get("default.replication.factor", "1")))


def class_settings(topic: TopicInfo, broker_config: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the settings of `CLASS_KEYS` a topic runs with (effective values; None: not readable)."""
    return {"replication_factor": topic.replication_factor,
            "min.insync.replicas": topic.min_insync_replicas,
            "unclean.leader.election.enable": topic.unclean_leader_election,
            "cleanup.policy": topic.config.get("cleanup.policy"),
            "flush.messages": topic.config.get("flush.messages") if "flush.messages" in topic.overrides else None,
            "flush.ms": topic.config.get("flush.ms") if "flush.ms" in topic.overrides else None,
            "auto_created": looks_auto_created(topic, broker_config)}


def class_label(settings: Mapping[str, Any]) -> str:
    """Pure: a short name of a class's settings, e.g. `rf1-isr1-auto`, `rf3-isr2-compact`."""
    parts = [f"rf{settings['replication_factor']}", f"isr{settings['min.insync.replicas'] or 'x'}"]
    if settings["unclean.leader.election.enable"]:
        parts.append("unclean")
    if "compact" in str(settings["cleanup.policy"] or ""):
        parts.append("compact")
    if settings["flush.messages"] is not None or settings["flush.ms"] is not None:
        parts.append("flush")
    if settings["auto_created"]:
        parts.append("auto")
    return "-".join(parts)


def _sort_key(settings: Mapping[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def reliability_classes(inventory: ClusterInventory, max_classes: int | None = None
                        ) -> tuple[tuple[ReliabilityClass, ...], dict[str, str]]:
    """Pure: the non-internal topics of `inventory` in reliability classes, and the excluded topics with why.

    Classes are ordered by topic count (most first), then by their first topic's name. With more than `max_classes`, each class
    past the first `max_classes` joins the kept class it differs from in the fewest settings (ties: the earlier
    one); its topics are listed in `grouped` with their own values."""
    if max_classes is not None and max_classes < 1:
        raise ScenarioError(f"--max-classes {max_classes}: give 1 or more")
    excluded = {t.name: "internal topic (Kafka's own: offsets, transactions); its replication is a broker "
                        "setting the replica takes over" for t in inventory.topics if t.internal}
    by_key: dict[str, tuple[dict[str, Any], list[TopicInfo]]] = {}
    for t in sorted(inventory.topics, key=lambda t: t.name):
        if t.internal:
            continue
        s = class_settings(t, inventory.broker_config)
        by_key.setdefault(_sort_key(s), (s, []))[1].append(t)
    ranked = sorted(by_key.values(), key=lambda e: (-len(e[1]), e[1][0].name))
    keep = ranked if max_classes is None else ranked[:max_classes]
    members: list[list[TopicInfo]] = [list(ts) for _, ts in keep]
    grouped: list[list[GroupedTopic]] = [[] for _ in keep]
    labels = _unique_labels([s for s, _ in keep])
    for settings, topics in ranked[len(keep):]:
        diffs = [sum(settings[k] != s[k] for k in CLASS_KEYS) for s, _ in keep]
        i = diffs.index(min(diffs))
        members[i] += topics
        differs = {k: settings[k] for k in CLASS_KEYS if settings[k] != keep[i][0][k]}
        grouped[i] += [GroupedTopic(t.name, class_label(settings), differs) for t in topics]
    classes = tuple(ReliabilityClass(label=labels[i], settings=dict(s), topics=tuple(t.name for t in members[i]),
                                     partitions=min(3, min(t.partitions for t in keep[i][1])),
                                     grouped=tuple(grouped[i])) for i, (s, _) in enumerate(keep))
    return classes, excluded


def _unique_labels(settings: list[dict[str, Any]]) -> list[str]:
    labels: list[str] = []
    for s in settings:
        label = class_label(s)
        labels.append(label if label not in labels else f"{label}-{hashlib.sha1(_sort_key(s).encode()).hexdigest()[:6]}")
    return labels


# --- the replica cluster and clients -------------------------------------------------------------

def replica_version(release: str | None) -> tuple[str, str | None]:
    """Pure: the Kafka version the replica runs for a discovered release line, and a note when it is not that
    line's or not known: the default's and the production version's lines map to them, another supported
    line to its `.0` release, anything else to the default."""
    if not release:
        return DEFAULT_KAFKA_VERSION, f"the cluster's Kafka release was not read: the replica runs {DEFAULT_KAFKA_VERSION}"
    for known in (DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION):
        if known.rsplit(".", 1)[0] == release:
            return known, None
    newest = tuple(int(x) for x in DEFAULT_KAFKA_VERSION.split(".")[:2])
    try:
        line = tuple(int(x) for x in release.split(".")[:2])
        if line > newest:
            raise ValueError(release)
        return check_version(f"{release}.0"), f"the replica runs {release}.0, the first release of the cluster's line {release}"
    except Exception:
        return DEFAULT_KAFKA_VERSION, (f"the cluster's release {release} cannot be installed here: the replica runs "
                                       f"{DEFAULT_KAFKA_VERSION}")


def replica_nodes(inventory: ClusterInventory) -> tuple[int, int, list[str]]:
    """Pure: (brokers, dedicated controllers, notes) of the replica: the cluster's brokers (at most
    `MAX_BROKERS`) and the quorum voters that are no broker (at most 5)."""
    notes = []
    brokers = sum(1 for n in inventory.nodes if n.roles is None or "broker" in n.roles) or 1
    if brokers > MAX_BROKERS:
        notes.append(f"the cluster has {brokers} brokers; the replica runs {MAX_BROKERS}, the most a scenario has")
        brokers = MAX_BROKERS
    broker_ids = {n.id for n in inventory.nodes}
    voters = [v.split("@")[0] for v in (inventory.controller_quorum or "").split(",") if "@" in v]
    controllers = min(5, sum(1 for v in voters if v.isdigit() and int(v) not in broker_ids))
    return brokers, controllers, notes


def replica_broker_config(inventory: ClusterInventory, brokers: int) -> dict[str, Any]:
    """Pure: the broker settings of `REPLICA_BROKER_KEYS` the cluster has (internal topics' replication at most
    the replica's brokers)."""
    config = {k: inventory.broker_config[k] for k in REPLICA_BROKER_KEYS if inventory.broker_config.get(k) is not None}
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        if key in config and str(config[key]).isdigit() and int(config[key]) > brokers:
            config[key] = str(brokers)
    return config


def client_config(settings: ClientSettings | None) -> tuple[str, dict[str, Any], dict[str, Any], list[str]]:
    """Pure: (client, producer config, consumer config, notes): the team's properties a scenario can take, with
    the dropped ones named (owned by a scenario field, or not about reliability)."""
    if settings is None:
        return "librdkafka", {}, {}, ["no client settings given (--app-config): the replica's clients run with "
                                      "librdkafka's defaults"]
    notes = []
    out = []
    # The consumer's group.id, isolation.level and enable.auto.commit become scenario fields (class_scenario).
    consumer_owned = {k: v for k, v in CONSUMER_OWNED.items() if k not in MAPPED_CONSUMER_KEYS}
    for role, props, owned in (("producer", settings.producer, PRODUCER_OWNED),
                               ("consumer", settings.consumer, consumer_owned)):
        kept = {}
        for name, value in sorted(props.items()):
            why = DROPPED_CLIENT_KEYS.get(name) or owned.get(name)
            if why:
                notes.append(f"{role} {name}={value} not taken over: {why}")
            else:
                kept[name] = value
        out.append(kept)
    return settings.client, out[0], out[1], notes


def plan_audit(inventory: ClusterInventory, settings: ClientSettings | None,
               max_classes: int | None = None) -> AuditPlan:
    """Pure: the audit plan of a discovered cluster and the team's client settings (see the module's doc)."""
    classes, excluded = reliability_classes(inventory, max_classes)
    version, version_note = replica_version(inventory.kafka_release)
    brokers, controllers, node_notes = replica_nodes(inventory)
    client, producer, consumer, client_notes = client_config(settings)
    notes = ([version_note] if version_note else []) + node_notes + client_notes
    notes += [f"{k} differs by broker ({v}); the replica takes the first broker's" for k, v in
              inventory.broker_config_differs.items() if k in REPLICA_BROKER_KEYS]
    return AuditPlan(bootstrap=inventory.bootstrap, cluster_id=inventory.cluster_id,
                     discovered_wall=inventory.discovered_wall, kafka_version=version, brokers=brokers,
                     controllers=controllers, broker_config=replica_broker_config(inventory, brokers), client=client,
                     producer=producer, consumer=consumer, transactions=bool(settings and settings.transactions),
                     classes=classes, excluded=excluded, notes=tuple(notes), max_classes=max_classes)


# --- scenarios -----------------------------------------------------------------------------------

def delivery_timeout_ms(client: str, producer: Mapping[str, Any]) -> int:
    """Pure: the producer's delivery timeout in ms (librdkafka's alias message.timeout.ms too; else the default)."""
    for key in ("delivery.timeout.ms", "message.timeout.ms"):
        if producer.get(key) not in (None, ""):
            return int(float(producer[key]))
    return DEFAULT_DELIVERY_TIMEOUT_MS.get(client, DEFAULT_DELIVERY_TIMEOUT_MS["java"])


def fault_entry(fault: str, plan: AuditPlan, producer: Mapping[str, Any], broker_config: Mapping[str, Any]
                ) -> dict[str, Any]:
    """Pure: the timeline entry of a fault of `FAULTS` on the replica."""
    at = FAULT_AT_S
    if fault == "leader-kill":
        return {"at": at, "kind": "kill", "target": "leader:0", "duration": SHORT_FAULT_S}
    if fault == "leader-outage":
        outage = delivery_timeout_ms(plan.client, producer) / 1000 + OUTAGE_MARGIN_S
        return {"at": at, "kind": "stop", "target": "leader:0", "duration": outage}
    if fault == "isolate":
        return {"at": at, "kind": "isolate", "target": "leader:0", "duration": SHORT_FAULT_S}
    if fault == "lost-ack":
        return {"at": at, "kind": "lost_ack", "target": "all", "params": {"every": 50, "count": 5, "reset": True},
                "duration": 5.0}
    if fault == "rolling-restart":
        # A rolling_restart changes a setting; this one, to the value it has, changes nothing that decides reliability.
        fetchers = broker_config.get("num.replica.fetchers", 1)
        return {"at": at, "kind": "rolling_restart", "params": {"config": {"num.replica.fetchers": fetchers}}}
    if fault == "power-loss":
        return {"at": at, "kind": "power_loss", "target": "leader:0", "duration": SHORT_FAULT_S}
    raise ScenarioError(f"unknown audit fault {fault!r}; the matrix: {', '.join(FAULTS)}")


def scenario_name(label: str, fault: str, suffix: str = "") -> str:
    """Pure: `audit-<class>-<fault>[-<suffix>]`, shortened with a hash to a scenario name's 63 characters."""
    name = "-".join(p for p in ("audit", label, fault, suffix) if p)
    return name if len(name) <= 63 else f"{name[:56]}-{hashlib.sha1(name.encode()).hexdigest()[:6]}"


def class_scenario(plan: AuditPlan, cls: ReliabilityClass, fault: str) -> dict[str, Any]:
    """Pure: the scenario document of class `cls` under one fault of the matrix, on the replica."""
    s = cls.settings
    auto = bool(s["auto_created"])
    topic_config = {k: s[k] for k in ("min.insync.replicas", "cleanup.policy", "flush.messages", "flush.ms")
                    if s[k] is not None}
    if s["unclean.leader.election.enable"] is not None:
        topic_config["unclean.leader.election.enable"] = str(s["unclean.leader.election.enable"]).lower()
    entry = fault_entry(fault, plan, plan.producer, plan.broker_config)
    duration = FAULT_AT_S + float(entry.get("duration", 60.0)) + TAIL_S
    producers: dict[str, Any] = {"rate": RATE, "duration_s": duration, "client": plan.client,
                                 "config": dict(plan.producer)}
    if plan.transactions:
        producers["transactions"] = {"batch": 50}
    consumers: dict[str, Any] = {"count": 1, "client": plan.client, "config": {
        k: v for k, v in plan.consumer.items() if k not in CONSUMER_OWNED}}
    if plan.consumer.get("isolation.level") in ("read_committed", "read_uncommitted"):
        consumers["isolation_level"] = plan.consumer["isolation.level"]
    if plan.consumer.get("group.id"):
        consumers["group"] = str(plan.consumer["group.id"])
    if str(plan.consumer.get("enable.auto.commit", "")).lower() == "true":
        consumers["commit"] = "auto"
    topic: dict[str, Any] = {"name": cls.topic, "partitions": cls.partitions,
                             "replication_factor": min(int(s["replication_factor"]), plan.brokers)}
    if auto:
        topic["create"] = False
    elif topic_config:
        topic["config"] = topic_config
    cluster: dict[str, Any] = {"brokers": plan.brokers, "kafka_version": plan.kafka_version}
    if plan.controllers:
        cluster["controllers"] = plan.controllers
    if plan.broker_config:
        cluster["config"] = dict(plan.broker_config)
    doc: dict[str, Any] = {
        "name": scenario_name(cls.label, fault),
        "description": f"Audit of {plan.cluster_id or plan.bootstrap}: class {cls.label} ({len(cls.topics)} topic(s): "
                       f"{', '.join(cls.topics[:5])}{', ...' if len(cls.topics) > 5 else ''}) under: {FAULTS[fault]}.",
        "tags": ["audit", f"audit-{cls.label}", f"fault-{fault}"],
        "guarantee": "at-least-once",
        "claims": {"delivery": {"within_s": DELIVERY_WITHIN_S}},
        "cluster": cluster, "topic": topic, "producers": producers, "consumers": consumers,
        "faults": [entry],
    }
    exercised = _exercised(fault, topic["replication_factor"])
    if exercised:
        doc["exercised"] = exercised
    return doc


def _exercised(fault: str, rf: int) -> list[dict[str, Any]]:
    """What shows the fault took effect: a new leader (replicated topics, faults that take the leader away),
    the proxy's dropped answers."""
    if fault == "lost-ack":
        return [{"check": "proxy_phase", "phase": "response_dropped"}]
    if fault in ("leader-kill", "leader-outage", "power-loss") and rf > 1:
        return [{"check": "leader_change", "partition": 0}]
    return []


def class_scenarios(plan: AuditPlan, cls: ReliabilityClass) -> dict[str, dict[str, Any]]:
    """Pure: the class's scenario documents by fault, in the matrix's order."""
    return {fault: class_scenario(plan, cls, fault) for fault in FAULTS}


def check_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document resolved by `spec.scenario.validate_document` (ScenarioError naming it otherwise)."""
    import copy
    return validate_document(copy.deepcopy(dict(doc)), f"generated scenario {doc.get('name')}")


# --- files ---------------------------------------------------------------------------------------

def utc_text(wall: Any) -> str:
    """Pure: a wall-clock time (epoch s) as `YYYY-MM-DD HH:MM:SS UTC`; "unknown" when missing or not a time."""
    import datetime
    import math
    try:
        wall = float(wall)
        if not math.isfinite(wall):
            return "unknown"
        return datetime.datetime.fromtimestamp(wall, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "unknown"


def scenario_text(plan: AuditPlan, doc: Mapping[str, Any], generated_wall: float) -> str:
    """Pure: a scenario file: a header saying where it comes from, then the document as YAML."""
    header = (f"# Generated by `kafkaproof audit` on {utc_text(generated_wall)} from the cluster "
              f"{plan.cluster_id or '?'} at {plan.bootstrap} (discovered {utc_text(plan.discovered_wall)}).\n"
              f"# An ordinary scenario file: keep it as your own suite (kafkaproof run / batch), edit it as you like.\n")
    return header + yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False, width=110)


def file_name(doc: Mapping[str, Any]) -> str:
    """Pure: a scenario's file name: its name (deterministic: class label and fault)."""
    return f"{doc['name']}.yaml"


def write_suite(plan: AuditPlan, out_dir: str | Path, generated_wall: float) -> list[Path]:
    """Write every class's scenarios (validated first) and `audit-plan.json` into `out_dir`; the paths written."""
    from .audit_fixes import fix_candidates
    out = Path(out_dir)
    docs = [(cls, fault, doc) for cls in plan.classes for fault, doc in class_scenarios(plan, cls).items()]
    for _, _, doc in docs:
        check_document(doc)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for _, _, doc in docs:
        path = out / file_name(doc)
        path.write_text(scenario_text(plan, doc, generated_wall))
        written.append(path)
    summary = plan.to_dict()
    summary["generated_wall"] = generated_wall
    summary["scenarios"] = {cls.label: {fault: file_name(doc) for c, fault, doc in docs if c is cls}
                            for cls in plan.classes}
    summary["fixes"] = {cls.label: [f.name for f in fix_candidates(plan, cls, class_scenario(plan, cls, "leader-kill"))]
                        for cls in plan.classes}
    path = out / "audit-plan.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return written + [path]


def plan_text(plan: AuditPlan) -> str:
    """Pure: the plan as a readable report: replica, clients, classes with their topics, grouped and excluded."""
    lines = [f"audit plan for {plan.cluster_id or '?'} at {plan.bootstrap}",
             f"replica: Kafka {plan.kafka_version}, {plan.brokers} broker(s)"
             + (f" + {plan.controllers} controller(s)" if plan.controllers else "")
             + ", broker settings: " + (", ".join(f"{k}={v}" for k, v in plan.broker_config.items()) or "defaults"),
             f"clients: {plan.client}; producer: " + (", ".join(f"{k}={v}" for k, v in plan.producer.items()) or
                                                       "defaults")
             + "; consumer: " + (", ".join(f"{k}={v}" for k, v in plan.consumer.items()) or "defaults"),
             f"fault matrix ({len(FAULTS)} scenarios per class): " + ", ".join(FAULTS),
             f"classes: {len(plan.classes)}" + (f" (--max-classes {plan.max_classes})" if plan.max_classes else "")]
    for cls in plan.classes:
        shown = ", ".join(f"{k}={v}" for k, v in cls.settings.items() if v is not None)
        lines.append(f"  {cls.label}: {len(cls.topics)} topic(s) [{shown}]: {', '.join(cls.topics)}")
        lines += [f"    grouped: {g.topic} (its own class {g.from_class}; differs: "
                  + ", ".join(f"{k}={v}" for k, v in g.differs.items()) + ")" for g in cls.grouped]
    lines += [f"excluded: {name}: {why}" for name, why in sorted(plan.excluded.items())]
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
