"""Client upgrades in the upgrade check: the Java clients rolled from one kafka-clients version to another,
and the client defaults that change between the two versions.

`with_client_version` is the override a side of the upgrade check applies (`Overrides.client_version`):
every producer and consumer runs the Java driver on that kafka-clients version. `default_changes` compares
the defaults two kafka-clients jars declare (read from the jars by the Java driver's `defaults` mode,
`run.java_driver.client_defaults`; never a hand-written table) and leaves out the properties a scenario sets
itself (`scenario_set`): those do not change with the client.

Pure: no I/O.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import InstallError, ScenarioError
from .group_protocol import check_group_protocol
from .versions import check_version

ROLES = ("producer", "consumer", "admin")
SECTIONS = {"producer": "producers", "consumer": "consumers"}  # the scenario section a client role runs from
# What the Java driver sets itself, whatever the scenario says (ProducerWorker/ConsumerWorker.properties).
DRIVER_SET: dict[str, frozenset[str]] = {
    "producer": frozenset({"bootstrap.servers", "key.serializer", "value.serializer", "transactional.id"}),
    "consumer": frozenset({"bootstrap.servers", "key.deserializer", "value.deserializer", "group.id",
                           "isolation.level", "enable.auto.commit", "auto.offset.reset"}),
    "admin": frozenset({"bootstrap.servers"}),
}
NO_DEFAULT = "(no default)"


def with_client_version(data: Mapping[str, Any], version: str, source: str) -> dict[str, Any]:
    """Pure: a resolved scenario document whose producers and consumers run the Java driver on kafka-clients
    `version` (`producers.client`/`consumers.client` java, `client_version` set). ScenarioError naming the
    field when the version is not supported or the scenario cannot run on it (e.g. group.protocol=consumer
    on a kafka-clients before 4.0), before anything starts."""
    if data.get("application"):
        raise ScenarioError(f"{source}: client_version (override): an application scenario runs the team's "
                            f"own clients; a client upgrade rolls kafkaproof's Java producers and consumers")
    try:
        check_version(version)
    except InstallError as e:  # not a version kafkaproof runs
        raise ScenarioError(f"{source}: producers.client_version (override): {e}") from None
    out = copy.deepcopy(dict(data))
    for section in SECTIONS.values():
        if section in out:
            out[section]["client"] = "java"
            out[section]["client_version"] = version

    def fail(where: str, message: str) -> None:
        raise ScenarioError(f"{source} (with client_version={version}): {where}: {message}")

    check_group_protocol(out, fail)
    return out


def scenario_set(data: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Pure: per client role, the properties that do not take the client's default in this scenario: its
    `config` and what the driver sets (`DRIVER_SET`); consumers with a `batch` set max.poll.records."""
    out = {}
    for role in ROLES:
        section = data.get(SECTIONS.get(role, "")) or {}
        names = set(DRIVER_SET[role]) | {k for k, v in (section.get("config") or {}).items() if v is not None}
        if role == "consumer" and section.get("batch"):
            names.add("max.poll.records")
        out[role] = frozenset(names)
    return out


@dataclass(frozen=True)
class DefaultChange:
    """One property whose declared default differs between two kafka-clients versions."""

    role: str  # producer | consumer | admin
    name: str
    current: str | None  # the current version's default (NO_DEFAULT when it has none)
    candidate: str | None

    def text(self) -> str:
        return f"{self.role} {self.name}: {shown_default(self.current)} → {shown_default(self.candidate)}"


@dataclass(frozen=True)
class DefaultsDiff:
    """What changes in the clients' defaults from `current` to `candidate` for one scenario."""

    current: str
    candidate: str
    changed: list[DefaultChange] = field(default_factory=list)  # defaults that differ, not set by the scenario
    only_current: dict[str, list[str]] = field(default_factory=dict)  # role -> properties the candidate lacks
    only_candidate: dict[str, list[str]] = field(default_factory=dict)  # role -> properties new in the candidate
    set_here: list[DefaultChange] = field(default_factory=list)  # differ, but the scenario sets them

    def to_json(self) -> dict[str, Any]:
        return {"current": self.current, "candidate": self.candidate,
                "changed": [c.__dict__ for c in self.changed], "only_current": self.only_current,
                "only_candidate": self.only_candidate, "set_here": [c.__dict__ for c in self.set_here]}

    @property
    def only_count(self) -> int:
        """How many properties only one of the two versions has."""
        return sum(map(len, self.only_current.values())) + sum(map(len, self.only_candidate.values()))


def shown_default(value: str | None) -> str:
    """Pure: a default as the page shows it: null, "" for an empty string, else the client's own string."""
    return "null" if value is None else '""' if value == "" else value


def _default(entry: Mapping[str, Any]) -> str | None:
    return entry["default"] if "default" in entry else NO_DEFAULT


def default_changes(current: Mapping[str, Any], candidate: Mapping[str, Any],
                    set_by_scenario: Mapping[str, frozenset[str]] | None = None) -> DefaultsDiff:
    """Pure: compare two `defaults` documents (`{"version", "producer": {name: {"type", "default"}}, ...}`, the
    Java driver's `defaults` mode). A property whose default differs is `changed` unless `set_by_scenario`
    (`scenario_set`) has it for that role (then `set_here`); a property only one version declares is listed
    apart, per role."""
    set_by = set_by_scenario or {}
    diff = DefaultsDiff(str(current.get("version") or "?"), str(candidate.get("version") or "?"))
    for role in ROLES:
        a, b = current.get(role) or {}, candidate.get(role) or {}
        for name in sorted(set(a) & set(b)):
            old, new = _default(a[name]), _default(b[name])
            if old != new:
                change = DefaultChange(role, name, old, new)
                (diff.set_here if name in set_by.get(role, ()) else diff.changed).append(change)
        if set(a) - set(b):
            diff.only_current[role] = sorted(set(a) - set(b))
        if set(b) - set(a):
            diff.only_candidate[role] = sorted(set(b) - set(a))
    return diff
