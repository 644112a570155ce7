"""The consumer group protocol (KIP-848) as a consumer setting: `consumers.config.group.protocol`.

Both drivers take the client property by the same name (`group.protocol`: `classic`, the default, or
`consumer`). This module checks, before anything starts, that a scenario's consumers can run with it:

- the clients: kafka-clients 3.7 brought the consumer protocol (early access in 3.7, preview in 3.8/3.9),
  4.0 made it generally available; librdkafka 2.4.0 brought it (early access), 2.12.0 made it generally
  available (confluent-kafka 2.16.1, pinned in requirements.txt, runs on librdkafka 2.16: GA);
- the cluster: Kafka 4.0 made it generally available (on by default, `group.version=1`); a 3.7-3.9
  cluster only has it when the scenario enables it (`cluster.config.group.coordinator.rebalance.protocols`
  naming `consumer`, a preview that Kafka says not to use in production);
- the settings: with `consumer` the assignment and the liveness are the broker's, so the classic-only
  properties (`partition.assignment.strategy`, `session.timeout.ms`, `heartbeat.interval.ms`,
  librdkafka's `group.protocol.type`) are refused; `group.remote.assignor` is the consumer protocol's only.

A consumer fault (`kill`, `stop`) may restart its consumer with changed settings (`params.config`, over
`consumers.config`; null removes a property): an online migration restarts the consumers one at a time with
`group.protocol: consumer` and without their classic-only settings.
Each restart's settings are checked as the consumers' own are.

The run records which protocol each consumer incarnation was started with and what the group coordinator
said of the group at the end (`run.drain.describe_group`); `protocol_text` is the report's line.

Pure functions: no I/O.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

PROPERTY = "group.protocol"
PROTOCOLS = ("classic", "consumer")
DEFAULT_PROTOCOL = "classic"
# Client properties the consumer protocol refuses (the broker assigns and tracks liveness) -> what to do instead.
CLASSIC_ONLY: dict[str, str] = {
    "partition.assignment.strategy": "the broker assigns partitions under group.protocol=consumer; choose its "
                                     "assignor with group.remote.assignor (uniform or range) or remove it",
    "session.timeout.ms": "the broker's group.consumer.session.timeout.ms applies under group.protocol=consumer; "
                          "remove it",
    "heartbeat.interval.ms": "the broker's group.consumer.heartbeat.interval.ms applies under "
                             "group.protocol=consumer; remove it",
    "group.protocol.type": "a classic-protocol setting of librdkafka; remove it",
}
CONSUMER_ONLY: dict[str, str] = {
    "group.remote.assignor": "only the consumer protocol has a broker-side assignor; set group.protocol: consumer "
                             "or remove it",
}
JAVA_FIRST, JAVA_GA = (3, 7), (4, 0)
LIBRDKAFKA_FIRST, LIBRDKAFKA_GA = (2, 4, 0), (2, 12, 0)
KAFKA_GA = (4, 0)
PREVIEW_SETTING = "group.coordinator.rebalance.protocols"

Fail = Callable[[str, str], None]


def version_tuple(version: str) -> tuple[int, ...]:
    """Pure: the leading numbers of a version (`4.3.1` -> (4, 3, 1), `2.16.0-RC1` -> (2, 16, 0))."""
    return tuple(int(n) for n in re.findall(r"\d+", str(version).split("-")[0])[:3])


def protocol_of(config: Mapping[str, Any] | None) -> str:
    """Pure: the group protocol a consumer of `config` runs with (lower case; the default when not set)."""
    return str((config or {}).get(PROPERTY, DEFAULT_PROTOCOL)).strip().lower()


def _check_config(config: Mapping[str, Any], where: str, fail: Fail) -> str:
    """The protocol of one consumer configuration, its value and its protocol-bound properties checked."""
    protocol = protocol_of(config)
    if protocol not in PROTOCOLS:
        fail(f"{where}.{PROPERTY}", f"{config[PROPERTY]!r} is not allowed; allowed: {', '.join(PROTOCOLS)}")
    refused = CLASSIC_ONLY if protocol == "consumer" else CONSUMER_ONLY
    for name in config:
        if name in refused:
            fail(f"{where}.{name}", f"not allowed with group.protocol={protocol}: {refused[name]}")
    return protocol


def restart_config(config: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the settings a consumer fault restarts its consumer with: `change` over `config`, a property
    `change` sets to null removed (a migration to the consumer protocol drops session.timeout.ms)."""
    return {k: v for k, v in {**config, **change}.items() if v is not None}


def consumer_configs(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Pure: every configuration a resolved scenario's consumers run with: (field, config) of
    `consumers.config` and of each consumer fault's restart (`faults[i].params.config` over it)."""
    base = dict(data["consumers"].get("config") or {})
    out = [("consumers.config", base)]
    for i, f in enumerate(data.get("faults") or []):
        extra = (f.get("params") or {}).get("config")
        if str(f.get("target", "")).startswith("consumer:") and extra:
            out.append((f"faults[{i}].params.config", restart_config(base, extra)))
    return out


def _cluster_problem(data: Mapping[str, Any]) -> str | None:
    """Why the scenario's cluster lacks the consumer protocol (None: it has it)."""
    cluster = data["cluster"]
    version = str(cluster["kafka_version"])
    if version_tuple(version) >= KAFKA_GA:
        return None
    protocols = str((cluster.get("config") or {}).get(PREVIEW_SETTING, "classic"))
    if "consumer" in [p.strip() for p in protocols.split(",")]:
        return None
    return (f"Kafka {version} (cluster.kafka_version) has no generally available consumer group protocol (GA in "
            f"4.0): use kafka_version 4.0 or later, or enable its preview with cluster.config.{PREVIEW_SETTING}: "
            f"classic,consumer")


def java_problem(version: str) -> str | None:
    """Pure: why kafka-clients `version` cannot run group.protocol=consumer (None: it can)."""
    if version_tuple(version) < JAVA_FIRST:
        return (f"kafka-clients {version} has no group.protocol=consumer (it came in 3.7, GA in 4.0): set "
                f"consumers.client_version to 4.0 or later")
    return None


def librdkafka_problem(version: str | None) -> str | None:
    """Pure: why librdkafka `version` cannot run group.protocol=consumer (None: it can, or it is not known)."""
    if version and version_tuple(version) < LIBRDKAFKA_FIRST:
        return (f"librdkafka {version} has no group.protocol=consumer (it came in 2.4.0, GA in 2.12.0): install "
                f"confluent-kafka 2.12 or later (requirements.txt pins 2.16.1)")
    return None


def check_group_protocol(data: Mapping[str, Any], fail: Fail) -> None:
    """Pure: the consumers' group protocol in every configuration they run with, against their client's version
    (the Java one: `consumers.client_version`, else the cluster's) and the cluster's; `fail(field, message)`
    on the first problem. librdkafka's own version is the runner's to check (`librdkafka_problem`)."""
    from .client_versions import requested_java_version
    cons = data["consumers"]
    if not cons.get("count"):
        return
    for where, config in consumer_configs(data):
        if _check_config(config, where, fail) != "consumer":
            continue
        if cons.get("mode") == "assign":
            fail(f"{where}.{PROPERTY}", "assign mode joins no group (it reads every partition itself); use "
                                        "consumers.mode: subscribe")
        if cons.get("client") == "java":
            problem = java_problem(requested_java_version(data, "consumers"))
            if problem:
                fail("consumers.client_version", problem)
        problem = _cluster_problem(data)
        if problem:
            fail(f"{where}.{PROPERTY}", problem)


def check_restart_config(config: Any, where: str) -> str | None:
    """Pure: what is wrong with a consumer fault's `params.config` (None: nothing): a mapping of client
    properties to scalars (null: remove the property), none of them one a scenario field owns."""
    from .clients import config_conflicts
    if not isinstance(config, Mapping) or not config:
        return f"{where}: expected client properties to restart the consumer with, e.g. {{group.protocol: consumer}}"
    for name, value in config.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return f"{where}.{name}: expected a string, number, boolean or null (remove it), got {value!r}"
    conflicts = config_conflicts("consumers", config)
    if conflicts:
        return f"{where}.{conflicts[0][0]}: {conflicts[0][1]}"
    return None


def protocol_text(started: list[Mapping[str, Any]] | None, group: Mapping[str, Any] | None) -> str | None:
    """Pure: the report's line: the protocol each consumer was started with, per incarnation (a change shows as
    `classic → consumer`), and what the coordinator said of the group; None when the run recorded neither."""
    if not started and not group:
        return None
    by_consumer: dict[int, list[str]] = {}
    for s in sorted(started or [], key=lambda s: (int(s["consumer"]), int(s["incarnation"]))):
        seq = by_consumer.setdefault(int(s["consumer"]), [])
        if not seq or seq[-1] != s["group_protocol"]:
            seq.append(str(s["group_protocol"]))
    parts = [f"consumer {i}: {' → '.join(seq)}" for i, seq in sorted(by_consumer.items())]
    if group:
        if group.get("error"):
            parts.append(f"group not described: {group['error']}")
        else:
            parts.append(f"group {group.get('group')} at the end: type {group.get('type')}, {group.get('state')}, "
                         f"{len(group.get('members') or [])} member(s)")
    return "; ".join(parts)
