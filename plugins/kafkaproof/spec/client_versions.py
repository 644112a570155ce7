"""Which client library, at which exact version, each producer and consumer of a run ran on.

The runner measures it (`kafkaproof.run.versions`) and records it in the manifest as
`client_versions` (docs/ledger-schema.md); this module is the typed form both sides share.
Runs written before the section existed are read off their `clients` and `versions`
(`read_client_versions`): the Python driver's librdkafka version was recorded then, and a Java
worker ran exactly the kafka-clients jar of the version its scenario asked for (the driver's
classpath takes no other); their `confluent_kafka` ('2', the first character of the version) is not shown.

Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .versions import DEFAULT_KAFKA_VERSION

ROLES = ("producers", "consumers")


@dataclass(frozen=True)
class ClientVersion:
    """One client library and its exact version (None: not known)."""

    name: str  # confluent-kafka | librdkafka | kafka-clients
    version: str | None

    def label(self) -> str:
        return f"{self.name} {self.version or '?'}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ClientVersion":
        return cls(str(d.get("name") or "?"), None if d.get("version") is None else str(d["version"]))


@dataclass(frozen=True)
class ProcessClient:
    """What one producer or consumer process ran on: its driver (`client`) and that driver's libraries."""

    role: str  # producers | consumers
    index: int
    client: str  # librdkafka (the Python driver) | java (the Java driver)
    libraries: tuple[ClientVersion, ...]

    def label(self) -> str:
        return ", ".join(lib.label() for lib in self.libraries) or f"{self.client} ?"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "client": self.client, "libraries": [lib.to_json() for lib in self.libraries]}


def requested_java_version(scenario: Mapping[str, Any], role: str) -> str:
    """Pure: the kafka-clients version a Java worker of `role` runs on: the section's `client_version`, else the
    cluster's Kafka version (what the runner passes the driver)."""
    section = scenario.get(role) or {}
    return str(section.get("client_version") or (scenario.get("cluster") or {}).get("kafka_version")
               or DEFAULT_KAFKA_VERSION)


def to_manifest(processes: Sequence[ProcessClient]) -> dict[str, list[dict[str, Any]]]:
    """Pure: the manifest's `client_versions` section ({"producers": [...], "consumers": [...]})."""
    return {role: [p.to_json() for p in processes if p.role == role] for role in ROLES}


def _full(version: Any) -> str | None:
    """An old manifest's `confluent_kafka`: kept only when it is a whole version (it was recorded as '2')."""
    return str(version) if version and "." in str(version) else None


def _derived(manifest: Mapping[str, Any]) -> list[ProcessClient]:
    versions = manifest.get("versions") or {}
    scenario = manifest.get("scenario") or {}
    clients = manifest.get("clients") or {}
    out = []
    for role in ROLES:
        entries = clients.get(role)
        if entries is None:  # before `clients` existed: one entry per process of the scenario's count
            section = scenario.get(role) or {}
            count = int(section.get("count", 1 if role == "producers" else 0))
            entries = [{"index": i, "client": section.get("client", "librdkafka")} for i in range(count)]
        for e in entries:
            client = str(e.get("client") or "librdkafka")
            if client == "java":
                libs: tuple[ClientVersion, ...] = (ClientVersion("kafka-clients",
                                                                 requested_java_version(scenario, role)),)
            else:
                ck = _full(versions.get("confluent_kafka"))
                libs = ((ClientVersion("confluent-kafka", ck),) if ck else ()) + \
                    (ClientVersion("librdkafka", versions.get("librdkafka")),)
            out.append(ProcessClient(role, int(e.get("index", 0)), client, libs))
    return out


def read_client_versions(manifest: Mapping[str, Any] | None) -> list[ProcessClient]:
    """Pure: every producer's and consumer's client libraries, from a manifest of any age (producers first)."""
    manifest = manifest or {}
    recorded = manifest.get("client_versions")
    if not isinstance(recorded, Mapping):
        return _derived(manifest)
    return [ProcessClient(role, int(e.get("index", 0)), str(e.get("client") or "?"),
                          tuple(ClientVersion.from_json(lib) for lib in e.get("libraries") or ()))
            for role in ROLES for e in recorded.get(role) or ()]


def _indices(indices: Sequence[int]) -> str:
    return str(indices[0]) if len(indices) == 1 else f"{indices[0]}-{indices[-1]}" \
        if list(indices) == list(range(indices[0], indices[-1] + 1)) else ",".join(map(str, indices))


def summary(processes: Sequence[ProcessClient]) -> list[str]:
    """Pure: one line per role and set of libraries, e.g. "producer 0: kafka-clients 4.3.1" or
    "consumers 0-2: confluent-kafka 2.16.1, librdkafka 2.16.0" (processes of a role on different
    libraries get a line each)."""
    lines = []
    for role in ROLES:
        groups: dict[str, list[int]] = {}
        for p in processes:
            if p.role == role:
                groups.setdefault(p.label(), []).append(p.index)
        for label, indices in groups.items():
            indices = sorted(indices)
            noun = role if len(indices) > 1 else role[:-1]
            lines.append(f"{noun} {_indices(indices)}: {label}")
    return lines
