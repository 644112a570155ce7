"""Persistent state of live clusters: what we started, so any process can heal and tear it down.

One JSON file per cluster at `<state_dir>/clusters/<name>/state.json`, updated
under an exclusive file lock. `kafkaproof cluster down` reads it after a crash
to kill our processes, heal our faults and remove our namespaces.

This is the only module that reads or writes that file: everyone else holds a `ClusterState`
(its nodes `NodeState`, with their `ProxyEntry` and `DiskEntry`; a compose cluster's `ComposeEntry`).
The JSON keeps the format of every earlier kafkaproof (a crashed run's state file is read by
`cluster down --all` of a newer one): a field missing from an older file gets its default, a key
this version does not know is kept as it was (`extra`) and written back.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import ClusterError, ClusterNotRunning
from ..paths import file_lock, state_dir, write_text_atomic
from ..spec.cluster import NodeLink, check_cluster_name
from .process import ProcessRef


def state_id() -> str:
    """A short id of this state directory (its resolved path's hash): what names this state's resources
    that live beyond it, on the host or its Docker engine (compose projects), apart from another's."""
    return hashlib.sha1(str(state_dir().resolve()).encode()).hexdigest()[:8]


def cluster_dir(name: str) -> Path:
    return state_dir() / "clusters" / check_cluster_name(name)


def state_path(name: str) -> Path:
    return cluster_dir(name) / "state.json"


def list_clusters() -> list[str]:
    """Names of clusters that have a state file."""
    root = state_dir() / "clusters"
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/state.json"))


def _empty(value: Any) -> bool:
    """Pure: whether an optional field holds nothing (left out of the file, as older kafkaproofs did)."""
    return value is None or value is False or (isinstance(value, (dict, list)) and not value) or (
        type(value) is int and value == 0)


def _split(data: Mapping[str, Any], cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pure: (the keys `cls` declares, the others) of a JSON object."""
    known = {f.name for f in fields(cls)} - {"extra"}
    return {k: v for k, v in data.items() if k in known}, {k: v for k, v in data.items() if k not in known}


@dataclass
class ProxyEntry:
    """A broker's fault proxy (`nodes[].proxy`): where it listens, what it forwards to, its process and
    control socket; `rewrite` and `peers` for the rewriting proxies of compose and existing clusters."""

    listen: str
    upstream: str
    process: ProcessRef | None = None
    control: str | None = None
    rewrite: bool = False
    peers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "ProxyEntry":
        known, extra = _split(data, ProxyEntry)
        return ProxyEntry(**{**known, "process": ProcessRef.from_json(known.get("process")),
                             "peers": dict(known.get("peers") or {})}, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out = {**self.extra, "listen": self.listen, "upstream": self.upstream,
               "process": self.process.to_json() if self.process else None, "control": self.control}
        if self.rewrite or self.peers:
            out.update(rewrite=self.rewrite, peers=dict(self.peers))
        return out


@dataclass
class DiskEntry:
    """A node's diskfs (`nodes[].disk`): its process and control socket (None: an older diskfs, listening
    in the abstract namespace)."""

    process: ProcessRef | None = None
    control: str | None = None

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "DiskEntry":
        return DiskEntry(ProcessRef.from_json(data.get("process")), data.get("control"))

    def to_json(self) -> dict[str, Any]:
        return {"process": self.process.to_json() if self.process else None, "control": self.control}


@dataclass
class NodeState:
    """One node of a cluster as its state file records it: roles, addresses and listener ports, its network
    link, its process (local) or container (compose), its fault proxy and disk, and what a rolling fault
    changed (`kafka_version`, `settings`, the jars or image it runs on)."""

    id: int
    roles: str | list[str]  # "broker,controller" (local: Kafka's process.roles) or ["broker", "controller"]
    host: str = ""
    client_port: int | None = None
    controller_port: int | None = None
    internal_port: int | None = None
    advertised_host: str = ""
    advertised_port: int | None = None
    link: NodeLink | None = None
    process: ProcessRef | None = None
    status: str = "new"
    proxy: ProxyEntry | None = None
    disk: DiskEntry | None = None
    # what a rolling fault changed (None: the cluster's own)
    kafka_version: str | None = None
    kafka_libs: str | None = None
    kafka_source: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    image: str | None = None
    recreated: int = 0
    # a compose node's service, container and bridge address
    service: str | None = None
    container: str | None = None
    ip: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # keys an older file may lack and this version writes only when set (so the format stays as it was)
    _OPTIONAL = ("proxy", "disk", "kafka_version", "kafka_libs", "kafka_source", "settings", "image", "recreated",
                 "service", "container", "ip", "controller_port", "internal_port")

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def address(self) -> str:
        """Where the node listens first: its CLIENT listener (a broker) or its CONTROLLER one."""
        return f"{self.host}:{self.client_port if self.is_broker else self.controller_port}"

    @property
    def advertised(self) -> str:
        """What clients connect to: the advertised CLIENT address (its proxy's, with one)."""
        return f"{self.advertised_host}:{self.advertised_port}"

    @property
    def namespace(self) -> str | None:
        return self.link.namespace if self.link else None

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "NodeState":
        known, extra = _split(data, NodeState)
        return NodeState(**{**known, "roles": known.get("roles") or [],
                            "link": NodeLink.from_json(known["link"]) if known.get("link") else None,
                            "process": ProcessRef.from_json(known.get("process")),
                            "proxy": ProxyEntry.from_json(known["proxy"]) if known.get("proxy") else None,
                            "disk": DiskEntry.from_json(known["disk"]) if known.get("disk") else None,
                            "settings": dict(known.get("settings") or {}),
                            "recreated": int(known.get("recreated") or 0)}, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The node's JSON object, as every kafkaproof wrote it (the form `spec.cluster`'s pure functions take)."""
        out: dict[str, Any] = {**self.extra}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in self._OPTIONAL and _empty(value):
                continue
            out[f.name] = value.to_json() if hasattr(value, "to_json") else value
        return out


@dataclass
class ComposeEntry:
    """A compose cluster's project, its compose files (the base, the override, `rolled.yml`) and subnet prefix."""

    project: str
    files: list[str]
    net_prefix: str

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "ComposeEntry":
        return ComposeEntry(data["project"], list(data["files"]), data["net_prefix"])

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "files": list(self.files), "net_prefix": self.net_prefix}


@dataclass
class ClusterState:
    """What a cluster's state file holds: what the backend started (nodes, proxies, disks, the compose
    project), how (version, network, heap, JIT, clock and disk faults, secured listener), the faults
    injected and not healed (with their heal recipes), and what a pipeline recorded of its use: its
    `owner`, whether it is `kept` for the next scenario, the `reuse` check and the `runs` it ran."""

    name: str
    backend: str = "local"
    slot: int | None = None
    cluster_id: str | None = None
    network: str = "loopback"  # netns | loopback (local), netns | engine (compose), external
    kafka_version: str | None = None
    kafka_libs: str | None = None
    kafka_source: str | None = None
    heap: str = "512m"
    jit: str = "full"  # a cluster started before the jit setting existed ran with the JVM's default
    proxy: bool = False
    clock: bool = False
    disk: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # `ClusterConfig.node_layout()`
    nodes: list[NodeState] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)  # fault records, each with its `heal` recipe
    created_wall: float | None = None
    security: dict[str, Any] | None = None  # a secured CLIENT listener (`security.provision_security`)
    client_config: dict[str, Any] | None = None  # how clients connect (holds credentials)
    engine: str | None = None  # compose: the Docker engine the cluster runs on
    image: str | None = None  # compose: the Kafka image
    compose: ComposeEntry | None = None
    bootstrap: str | None = None  # external: the bootstrap servers the user gave
    rolled: bool = False  # a rolling fault changed a node: never reused
    # what a pipeline records (`reuse.py`)
    owner: dict[str, Any] | None = None
    kept_at: float | None = None  # kept for the next scenario since (JSON `kept: {"at": ...}`)
    reuse: dict[str, Any] | None = None
    runs: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    # keys an older file may lack and this version writes only when set
    _OPTIONAL = ("slot", "kafka_libs", "kafka_source", "config", "security", "client_config", "engine", "image",
                 "compose", "bootstrap", "rolled", "owner", "reuse", "runs")
    _LOCAL_ONLY = ("heap", "jit", "clock", "disk")

    def node(self, node_id: int) -> NodeState | None:
        """The node `node_id`, None when the cluster has none."""
        return next((n for n in self.nodes if n.id == node_id), None)

    @property
    def broker_nodes(self) -> list[NodeState]:
        return [n for n in self.nodes if n.is_broker]

    def node_version(self, node: NodeState) -> str | None:
        """The Kafka version `node` runs: its own after a rolling upgrade, else the cluster's."""
        return node.kafka_version or self.kafka_version

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "ClusterState":
        """Parse a state file's JSON, of this kafkaproof or an older one (missing fields get their defaults)."""
        known, extra = _split(data, ClusterState)
        kept = extra.pop("kept", None)
        return ClusterState(**{**known, "nodes": [NodeState.from_json(n) for n in known.get("nodes") or []],
                               "faults": list(known.get("faults") or []),
                               "config": dict(known.get("config") or {}),
                               "compose": ComposeEntry.from_json(known["compose"]) if known.get("compose") else None,
                               "runs": list(known.get("runs") or [])},
                            kept_at=kept["at"] if kept else None, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The state file's JSON object (the format every kafkaproof wrote)."""
        out: dict[str, Any] = {**self.extra}
        for f in fields(self):
            if f.name in ("extra", "kept_at"):
                continue
            value = getattr(self, f.name)
            if f.name in self._OPTIONAL and _empty(value):
                continue
            if f.name in self._LOCAL_ONLY and self.backend != "local":
                continue
            if f.name == "nodes":
                value = [n.to_json() for n in value]
            elif hasattr(value, "to_json"):
                value = value.to_json()
            out[f.name] = value
        if self.kept_at is not None:
            out["kept"] = {"at": self.kept_at}
        return out


def slot_in_file(path: Path) -> int | None:
    """The slot a state file (maybe another state directory's, or another user's) names; raises what reading
    it raises (FileNotFoundError, PermissionError, ValueError for a file being written)."""
    return json.loads(Path(path).read_text()).get("slot")


def load_state(name: str) -> ClusterState:
    """The state of cluster `name`; ClusterNotRunning when it has none."""
    path = state_path(name)
    if not path.exists():
        raise ClusterNotRunning(f"no cluster named {name!r} is running (no {path}); start one with `kafkaproof cluster up`")
    try:
        return ClusterState.from_json(json.loads(path.read_text()))
    except PermissionError as e:
        raise ClusterError(f"cluster {name!r} is another user's: its state file {path} and fault controls are "
                           f"its owner's only; run this as that user ({e.strerror})") from e


def save_state(name: str, state: ClusterState) -> None:
    """Replace the cluster's state file at once. Only its owner can read it (mode 0600): it holds the
    cluster's client settings, a secured cluster's password among them."""
    write_text_atomic(state_path(name), json.dumps(state.to_json(), indent=2, sort_keys=True), private=True)


def remove_state(name: str) -> int | None:
    """Forget a cluster that is down: its state file. Returns the host-wide slot it named (the caller releases
    its claim: `host.forget_cluster`)."""
    path = state_path(name)
    try:
        slot = slot_in_file(path)
    except (FileNotFoundError, ValueError):
        slot = None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return slot


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Exclusive lock on one cluster's state across processes."""
    with file_lock(cluster_dir(name) / ".lock"):
        yield


@contextlib.contextmanager
def update_state(name: str) -> Iterator[ClusterState]:
    """Load, let the caller change, and save a cluster's state under the lock."""
    with locked(name):
        state = load_state(name)
        yield state
        save_state(name, state)


@contextlib.contextmanager
def update_node(name: str, node_id: int) -> Iterator[NodeState]:
    """Load, let the caller change one node of, and save a cluster's state under the lock."""
    with update_state(name) as st:
        node = st.node(node_id)
        if node is None:
            raise ClusterError(f"node {node_id} is not in cluster {name!r} (nodes: {[n.id for n in st.nodes]})")
        yield node
