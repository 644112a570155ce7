"""A scenario's `share` section (issue 46, KIP-932): N share consumers of one share group and how they acknowledge.

The share consumers are the Java driver's (`KafkaShareConsumer` of kafka-clients). Each consumer polls, spends
`processing_ms` per record, then acknowledges it by the `ack` policy: accept, or release with probability
`release`, reject with probability `reject`, or no acknowledgement at all for a fraction `no_ack` (its lock times
out and the broker redelivers it); `poison_every: n` makes every n-th value of each producer a poison record the
consumers always release, until the broker gives it up at the delivery limit. `mode: implicit` lets the next poll
accept every record of the previous one (only accept is possible then). The group's `delivery_limit` and
`lock_timeout_ms` become its group configs (`share.delivery.count.limit`, `share.record.lock.duration.ms`).

Share groups: Kafka 4.0 shipped an early-access version with unstable RPCs the 4.x clients do not speak; 4.1 a
preview enabled by the `share.version` feature (here: `cluster.config.group.share.enable: true`); 4.2 made them
generally available, enabled by default. Pure: no I/O.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from .coordinator_targets import check_scenario_targets
from .share_ledger import DEFAULT_DELIVERY_LIMIT, DEFAULT_LOCK_TIMEOUT_MS

ACK_MODES = ("explicit", "implicit")
# Kafka's bounds: group.share.{min,max}.delivery.count.limit (2..10), lock durations the broker accepts when its
# group.share.min.record.lock.duration.ms is lowered to match (the run does).
MIN_DELIVERY_LIMIT, MAX_DELIVERY_LIMIT = 2, 10
MIN_LOCK_TIMEOUT_MS, MAX_LOCK_TIMEOUT_MS = 1000, 3_600_000
FIRST_SHARE_VERSION = (4, 1)      # the preview: the share.version feature must be enabled
DEFAULT_ON_VERSION = (4, 2)       # generally available: enabled by default
ENABLE_SETTING = "group.share.enable"
# Broker bounds the group's own settings must lie within (Kafka's defaults: lock 15 s..60 s, limit 2..10): the run
# widens them in the cluster's config when the section asks for a shorter or longer lock.
MIN_LOCK_SETTING, MAX_LOCK_SETTING = "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"
BROKER_MIN_LOCK_MS, BROKER_MAX_LOCK_MS = 15_000, 60_000
# Client settings the driver owns: the ack mode comes from `ack.mode`; a share consumer has no group protocol.
RESERVED_CONFIG = {"share.acknowledgement.mode": "set share.ack.mode (explicit | implicit) instead",
                   "group.protocol": "a share consumer has no group protocol (KafkaShareConsumer always uses the "
                                     "share group protocol); remove it",
                   "group.id": "set share.group instead"}

SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "description": "share consumers (KIP-932, the Java driver's KafkaShareConsumer) of one share group; needs Kafka "
                   ">= 4.2 (4.1: with cluster.config.group.share.enable: true)",
    "properties": {
        "consumers": {"type": "integer", "minimum": 1, "maximum": 16, "description": "share consumers (default 2)"},
        "group": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$",
                  "description": "the share group id (default kp-share-<scenario name>)"},
        "processing_ms": {"type": "number", "minimum": 0, "description": "time spent per record before its ack"},
        "ack": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "mode": {"enum": list(ACK_MODES), "description": "explicit (default): one acknowledgement per "
                                                                 "record; implicit: the next poll accepts them"},
                "release": {"type": "number", "minimum": 0, "maximum": 1, "description": "probability of release"},
                "reject": {"type": "number", "minimum": 0, "maximum": 1, "description": "probability of reject"},
                "no_ack": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "fraction never acknowledged: their locks time out"},
                "poison_every": {"type": "integer", "minimum": 1,
                                 "description": "every n-th value of each producer is always released, until "
                                                "given up at the delivery limit"}}},
        "delivery_limit": {"type": "integer", "minimum": MIN_DELIVERY_LIMIT, "maximum": MAX_DELIVERY_LIMIT,
                           "description": f"the group's share.delivery.count.limit (default {DEFAULT_DELIVERY_LIMIT})"},
        "lock_timeout_ms": {"type": "integer", "minimum": MIN_LOCK_TIMEOUT_MS, "maximum": MAX_LOCK_TIMEOUT_MS,
                            "description": "the group's share.record.lock.duration.ms "
                                           f"(default {DEFAULT_LOCK_TIMEOUT_MS})"},
        "config": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                   "description": "kafka-clients share consumer properties"},
    }}

DEFAULTS: dict[str, Any] = {"consumers": 2, "processing_ms": 0,
                            "ack": {"mode": "explicit", "release": 0.0, "reject": 0.0, "no_ack": 0.0},
                            "delivery_limit": DEFAULT_DELIVERY_LIMIT, "lock_timeout_ms": DEFAULT_LOCK_TIMEOUT_MS,
                            "config": {}}


def _version(text: str) -> tuple[int, int]:
    m = re.match(r"^(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def share_support(kafka_version: str, cluster_config: dict[str, Any]) -> str | None:
    """Pure: None when a cluster of `kafka_version` with `cluster_config` runs share groups, else why not (naming
    the field to change and what the version supports)."""
    v = _version(kafka_version)
    enable = cluster_config.get(ENABLE_SETTING)
    enabled = None if enable is None else str(enable).lower() == "true"
    if v < FIRST_SHARE_VERSION:
        return (f"Kafka {kafka_version} has no share groups the Java share consumer can use (4.0: early access with "
                f"unstable RPCs; earlier: none); set cluster.kafka_version to 4.2 or later")
    if v < DEFAULT_ON_VERSION and not enabled:
        return (f"Kafka {kafka_version} has share groups as a preview, off by default (the share.version feature); "
                f"set cluster.config.{ENABLE_SETTING}: true, or cluster.kafka_version 4.2 or later")
    if enabled is False:
        return f"cluster.config.{ENABLE_SETTING} is false: share groups are off on the cluster; remove it"
    return None


def with_defaults(section: dict[str, Any], scenario_name: str) -> dict[str, Any]:
    """Pure: the section with its defaults filled in (the group named after the scenario)."""
    out = {**DEFAULTS, "group": f"kp-share-{scenario_name}", **section}
    out["ack"] = {**DEFAULTS["ack"], **(section.get("ack") or {})}
    out["config"] = dict(section.get("config") or {})
    return out


def check_share(data: dict[str, Any], fail: Callable[[str, str], None]) -> None:
    """Check a loaded scenario's `share` section against its cluster and claims and fill its defaults in place;
    `fail(field, message)` raises. A `claims.share_group` without the section is refused too."""
    section = data.get("share")
    check_scenario_targets(data, fail)  # `share_coordinator` needs this section
    if section is None:
        if "share_group" in (data.get("claims") or {}):
            fail("claims.share_group", "needs a share section (share consumers): it judges their deliveries")
        return
    cluster = data["cluster"]
    why = share_support(str(cluster["kafka_version"]), cluster.get("config") or {})
    if why:
        fail("share", why)
    if data.get("application"):
        fail("share", "an application run has no kafkaproof share consumers; remove one of the two sections")
    for name, instead in RESERVED_CONFIG.items():
        if name in (section.get("config") or {}):
            fail(f"share.config.{name}", instead)
    ack = section.get("ack") or {}
    if ack.get("mode") == "implicit" and any(ack.get(k) for k in ("release", "reject", "no_ack", "poison_every")):
        fail("share.ack.mode", "implicit: the next poll accepts every record, so release, reject, no_ack and "
                               "poison_every need mode: explicit")
    total = sum(float(ack.get(k) or 0) for k in ("release", "reject", "no_ack"))
    if total > 1:
        fail("share.ack", f"release + reject + no_ack is {total:g}: the probabilities of one record add up to at "
                          f"most 1")
    cons = data["consumers"]
    if cons.get("client", "java") != "java":
        fail("consumers.client", f"{cons['client']!r}: the share consumers are the Java driver's KafkaShareConsumer "
                                 f"(confluent-kafka's ShareConsumer is not used); remove it")
    client_version = str(cons.get("client_version") or cluster["kafka_version"])
    if _version(client_version) < FIRST_SHARE_VERSION:
        fail("consumers.client_version", f"kafka-clients {client_version} has no KafkaShareConsumer that speaks the "
                                         f"share-group RPCs of Kafka 4.1+; use 4.1 or later (or remove it)")
    data["share"] = share = with_defaults(section, data["name"])
    cons["count"] = share["consumers"]  # the share consumers take the consumers' places (consumer:<i> faults)
    cons["client"] = "java"
    config = cluster.setdefault("config", {})
    lock = int(share["lock_timeout_ms"])
    if lock < BROKER_MIN_LOCK_MS:
        config.setdefault(MIN_LOCK_SETTING, min(lock, BROKER_MIN_LOCK_MS))
    if lock > BROKER_MAX_LOCK_MS:
        config.setdefault(MAX_LOCK_SETTING, lock)
    for name, bound in ((MIN_LOCK_SETTING, lambda v: v <= lock), (MAX_LOCK_SETTING, lambda v: v >= lock)):
        if name in config and not bound(int(config[name])):
            fail(f"cluster.config.{name}", f"{config[name]}, but share.lock_timeout_ms is {lock}: the broker would "
                                           f"refuse the group's lock duration")
