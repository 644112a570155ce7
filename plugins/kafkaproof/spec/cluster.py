"""Cluster configuration and the plan of a local cluster's nodes, as pure data.

What cluster to start (`ClusterConfig`, or from a scenario: `cluster_config`), the
properties each node gets (`node_properties`), and where each node lives on the host:
its network namespace, addresses and ports (`plan_nodes`, `plan_link`). The backends in
`kafkaproof.cluster` act on these plans; nothing here has a side effect.

A node's network (cluster slot `s`, node position `i`): namespace `kp<s>n<id>`, a veth pair
`kp<s>n<id>h` (root namespace) <-> `eth0` (node namespace) carrying the /30 `10.77.<s>.<4i>`;
the root side is `.4i+1`, the node `.4i+2`. Without root, nodes listen on `127.0.0.1` ports
`20000 + 50*slot + 3*i (+1, +2)`.
"""
from __future__ import annotations

import base64
import ipaddress
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ClusterError
from . import cluster_features, jbod
from .connection import PROXY_ON_TLS, SASL_MECHANISMS, SECURITY_PROTOCOLS
from .versions import DEFAULT_KAFKA_VERSION

CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT = 9092, 9093, 9094
LOOPBACK_PORT_BASE = 20000
CONTROLLER_ID_BASE = 100
MAX_BROKERS = 9
# Without root the proxy of a node listens on this loopback address at the node's own
# client port (the whole of 127.0.0.0/8 is local on Linux), so its port cannot collide.
LOOPBACK_PROXY_HOST = "127.0.0.2"
# JVM flags per JIT mode. Test brokers live for a minute: C2 compiles through most of it, on the
# cores the clients need; C1 alone starts a 3-node cluster in ~10 s instead of ~17 s here and
# carries thousands of messages per second. `full` is the JVM's default, for long or heavy runs.
CLUSTER_BACKENDS = ("local", "compose")
# The node layouts compose/ has a file for: (brokers, dedicated controllers) -> file stem.
COMPOSE_TOPOLOGIES = {(2, 0): "kraft-2-combined", (3, 0): "kraft-3-combined", (3, 1): "kraft-3-brokers-1-controller"}
JIT_MODES: dict[str, tuple[str, ...]] = {"quick": ("-XX:TieredStopAtLevel=1",), "full": ()}
CLUSTER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")


def check_cluster_name(name: str) -> str:
    """A cluster name as the state files and namespaces need it; ClusterError otherwise."""
    if not CLUSTER_NAME_RE.match(name):
        raise ClusterError(f"cluster name {name!r} is invalid: use 1-31 lowercase letters, digits and '-'")
    return name


@dataclass(frozen=True)
class ClusterConfig:
    """What cluster to start. `controllers=0` means combined broker+controller nodes."""

    name: str = "default"
    brokers: int = 3
    controllers: int = 0
    kafka_version: str = DEFAULT_KAFKA_VERSION
    broker_config: Mapping[str, Any] = field(default_factory=dict)
    node_config: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    heap: str = "512m"
    jit: str = "quick"  # quick: C1 only (brokers ready in about half the time) | full: C1 and C2
    network: str = "auto"  # auto | netns | loopback
    start_timeout_s: float = 120.0
    proxy: bool = False  # a fault proxy per broker on the client path
    backend: str = "local"  # local (JVMs on this host) | compose (containers of a compose project)
    image: str | None = None  # compose: the Kafka image (None: kafkaproof/kafka:<kafka_version>, built locally)
    compose_file: str | None = None  # compose: the user's own file instead of compose/<topology>.yml
    clock: bool = False  # local: nodes run under libfaketime, so clock faults can shift their clocks
    disk: bool = False  # local: log directories on diskfs (FUSE), so disk faults can fail them or cut the power
    log_dirs: int = 1  # local: log directories per broker (JBOD, spec/jbod.py)
    client_security: str = "PLAINTEXT"  # local: the CLIENT listener's protocol (INTERNAL and CONTROLLER stay plaintext)
    sasl_mechanism: str = "SCRAM-SHA-256"  # local, with a SASL protocol: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    features: Mapping[str, int] = field(default_factory=dict)  # local: format-time levels (spec/cluster_features.py)

    def validate(self) -> "ClusterConfig":
        check_cluster_name(self.name)
        if not isinstance(self.brokers, int) or not 1 <= self.brokers <= MAX_BROKERS:
            raise ClusterError(f"brokers must be an integer from 1 to {MAX_BROKERS}, got {self.brokers!r}")
        if not isinstance(self.controllers, int) or not 0 <= self.controllers <= 5:
            raise ClusterError(f"controllers must be 0 (combined broker+controller nodes) to 5, got {self.controllers!r}")
        if self.jit not in JIT_MODES:
            raise ClusterError(f"jit must be one of {', '.join(JIT_MODES)}, got {self.jit!r}")
        if self.network not in ("auto", "netns", "loopback"):
            raise ClusterError(f"network must be auto, netns or loopback, got {self.network!r}")
        if self.backend not in CLUSTER_BACKENDS:
            raise ClusterError(f"backend must be one of {', '.join(CLUSTER_BACKENDS)}, got {self.backend!r}")
        if self.backend == "compose":
            compose_topology(self.brokers, self.controllers)
        elif self.image or self.compose_file:
            raise ClusterError(f"image/compose_file: only the compose backend takes them (backend is {self.backend})")
        if self.clock and self.backend != "local":
            raise ClusterError(f"clock: only the local backend starts its nodes under libfaketime "
                               f"(backend is {self.backend})")
        if not isinstance(self.log_dirs, int) or not 1 <= self.log_dirs <= jbod.MAX_LOG_DIRS or (
                self.log_dirs > 1 and self.backend != "local"):
            raise ClusterError(f"log_dirs must be 1 to {jbod.MAX_LOG_DIRS}, and above 1 only on the local backend; "
                               f"got {self.log_dirs!r} (backend {self.backend})")
        if self.disk and self.backend != "local":
            raise ClusterError(f"disk: only the local backend puts its nodes' log directories on diskfs "
                               f"(backend is {self.backend})")
        self._validate_security()
        self._validate_features()
        for node_id in self.node_config:
            if node_id not in self.node_ids():
                raise ClusterError(f"node_config names node {node_id}, which this cluster does not have "
                                   f"(nodes: {self.node_ids()})")
        return self

    def _validate_features(self) -> None:
        if self.features and self.backend != "local":
            raise ClusterError(f"features: only the local backend formats its nodes with kafka-storage format "
                               f"--feature (backend is {self.backend})")
        for name, level in sorted(self.features.items()):
            if (problem := cluster_features.level_problem(name, level, self.kafka_version)) is not None:
                raise ClusterError(f"features.{name}: {problem}")

    def _validate_security(self) -> None:
        if self.client_security not in SECURITY_PROTOCOLS:
            raise ClusterError(f"client_security must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                               f"got {self.client_security!r}")
        if self.client_security == "PLAINTEXT":
            return
        if self.backend != "local":
            raise ClusterError(f"client_security: only the local backend starts secured listeners (backend is "
                               f"{self.backend}); for a secured cluster of your own use --bootstrap with --client-config")
        if self.client_security.startswith("SASL_") and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ClusterError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {self.sasl_mechanism!r}")
        if self.proxy and self.client_security in ("SSL", "SASL_SSL"):
            raise ClusterError(PROXY_ON_TLS.format(protocol=self.client_security))

    @classmethod
    def from_layout(cls, name: str, layout: Mapping[str, Any], kafka_version: str) -> "ClusterConfig":
        """Pure: the config of a running cluster from its state file's `node_layout()` (inverse of it)."""
        return cls(name=name, brokers=layout["brokers"], controllers=layout["controllers"],
                   kafka_version=kafka_version, broker_config=dict(layout["broker_config"]),
                   node_config={int(k): dict(v) for k, v in layout["node_config"].items()},
                   log_dirs=int(layout.get("log_dirs", 1)), features=dict(layout.get("features") or {}))

    def node_layout(self) -> dict[str, Any]:
        """Pure: the nodes and their settings, as a cluster's state file records them."""
        layout = {"brokers": self.brokers, "controllers": self.controllers, "broker_config": dict(self.broker_config),
                  "node_config": {str(k): dict(v) for k, v in self.node_config.items()}}
        if self.features:  # only when pinned (older states: the release's defaults)
            layout["features"] = dict(self.features)
        return {**layout, "log_dirs": self.log_dirs} if self.log_dirs > 1 else layout  # older states: 1

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def controller_ids(self) -> list[int]:
        """Voters of the KRaft quorum."""
        if self.controllers == 0:
            return self.broker_ids()
        return list(range(CONTROLLER_ID_BASE + 1, CONTROLLER_ID_BASE + 1 + self.controllers))

    def node_ids(self) -> list[int]:
        ids = self.broker_ids()
        return ids if self.controllers == 0 else ids + self.controller_ids()

    def roles(self, node_id: int) -> str:
        if self.controllers == 0:
            return "broker,controller"
        return "broker" if node_id <= self.brokers else "controller"


def compose_topology(brokers: int, controllers: int) -> str:
    """Pure: the compose file stem (compose/<stem>.yml) of a node layout; ClusterError naming the layouts there are."""
    try:
        return COMPOSE_TOPOLOGIES[(brokers, controllers)]
    except KeyError:
        known = ", ".join(f"{b} brokers with {c or 'no'} dedicated controller{'s' if c != 1 else ''}"
                          for b, c in COMPOSE_TOPOLOGIES)
        raise ClusterError(f"the compose backend has no compose file for {brokers} brokers with "
                           f"{controllers or 'no'} dedicated controllers; compose/ has: {known}") from None


def default_broker_config(brokers: int) -> dict[str, Any]:
    """Production-like defaults for a small cluster, sized for a 2-core host."""
    rf = min(3, brokers)
    return {
        "num.partitions": 1,
        "default.replication.factor": rf,
        "min.insync.replicas": min(2, rf),
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(2, rf),
        "transaction.state.log.num.partitions": 10,
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.replica.fetchers": 1,
        "background.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "log.segment.bytes": 64 * 1024 * 1024,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min(2, rf),
    }


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.

    Never one starting with '-' (as Kafka's own Uuid.randomUuid): the storage tool's
    argument parser would take it for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def client_listener_properties(security: Mapping[str, Any], node_id: int, broker: bool) -> dict[str, Any]:
    """Pure: the properties of a secured CLIENT listener (`security`: a state file's section, see
    `cluster.security`): a PEM key store for TLS, the mechanism and its users for SASL."""
    protocol = security["protocol"]
    props: dict[str, Any] = {"listener.security.protocol.map": f"CLIENT:{protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"}
    if not broker:
        return props
    if protocol in ("SSL", "SASL_SSL"):
        props["listener.name.client.ssl.keystore.type"] = "PEM"
        props["listener.name.client.ssl.keystore.location"] = security["keystores"][str(node_id)]
    if protocol.startswith("SASL_"):
        mechanism = security["mechanism"]
        props["listener.name.client.sasl.enabled.mechanisms"] = mechanism
        if mechanism == "PLAIN":
            users = " ".join(f'user_{u}="{pw}"' for u, pw in security["users"].items())
            module = "org.apache.kafka.common.security.plain.PlainLoginModule required " + users
        else:  # SCRAM: the credentials are in the metadata log (`kafka-storage format --add-scram`)
            module = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        props[f"listener.name.client.{mechanism.lower()}.sasl.jaas.config"] = module + ";"
    return props


def scram_format_args(security: Mapping[str, Any] | None) -> list[str]:
    """Pure: the storage tool's `--add-scram` arguments that create a SCRAM listener's users."""
    if not security or not str(security.get("mechanism", "")).startswith("SCRAM") \
            or not security["protocol"].startswith("SASL_"):
        return []
    return [arg for user, pw in security["users"].items()
            for arg in ("--add-scram", f"{security['mechanism']}=[name={user},password={pw}]")]


def node_properties(config: ClusterConfig, node: dict, nodes: list[dict], workdir: Path,
                    kafka_major: int, security: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Pure: the server.properties of one node (`security`: its secured CLIENT listener, if any)."""
    by_id = {n["id"]: n for n in nodes}
    voters = ",".join(f"{v}@{by_id[v]['host']}:{by_id[v]['controller_port']}" for v in config.controller_ids())
    roles = config.roles(node["id"])
    listeners, advertised = [], []
    if "broker" in roles:
        listeners += [f"CLIENT://{node['host']}:{node['client_port']}", f"INTERNAL://{node['host']}:{node['internal_port']}"]
        advertised += [f"CLIENT://{node['advertised_host']}:{node['advertised_port']}",
                       f"INTERNAL://{node['host']}:{node['internal_port']}"]
    if "controller" in roles:
        listeners.append(f"CONTROLLER://{node['host']}:{node['controller_port']}")
    props: dict[str, Any] = {
        "node.id": node["id"],
        "process.roles": roles,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        **jbod.dir_properties(workdir / "data", config.log_dirs if "broker" in roles else 1),
    }
    if "broker" in roles:
        props["advertised.listeners"] = ",".join(advertised)
        props["inter.broker.listener.name"] = "INTERNAL"
        if kafka_major < 4:
            props["controller.quorum.election.timeout.ms"] = 1000
    if "controller" in roles and "broker" not in roles:
        props["advertised.listeners"] = f"CONTROLLER://{node['host']}:{node['controller_port']}"
    if security:
        props.update(client_listener_properties(security, node["id"], "broker" in roles))
    props.update(default_broker_config(config.brokers))
    props.update({k: v for k, v in config.broker_config.items()})
    props.update(config.node_config.get(node["id"], {}))
    return props


def render_properties(props: Mapping[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return "".join(f"{k}={fmt(v)}\n" for k, v in props.items())


def plan_nodes(config: ClusterConfig, slot: int, use_netns: bool) -> list[dict]:
    nodes = []
    for pos, node_id in enumerate(config.node_ids()):
        if use_netns:
            link = plan_link(slot, pos, node_id)
            host, ports = link.node_ip, (CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT)
        else:
            link = None
            base = LOOPBACK_PORT_BASE + slot * 50 + pos * 3
            host, ports = "127.0.0.1", (base, base + 1, base + 2)
        nodes.append({
            "id": node_id, "roles": config.roles(node_id), "host": host,
            "client_port": ports[0], "controller_port": ports[1], "internal_port": ports[2],
            "advertised_host": host, "advertised_port": ports[0],
            "link": link.to_json() if link else None, "process": None, "status": "new",
        })
        if config.proxy and "broker" in config.roles(node_id):
            # The proxy listens where clients in the root namespace reach the node: the
            # root side of its veth (netns) or a second loopback address (loopback).
            proxy_host = link.host_ip if link else LOOPBACK_PROXY_HOST
            nodes[-1].update(advertised_host=proxy_host, advertised_port=ports[0])
            nodes[-1]["proxy"] = {"listen": f"{proxy_host}:{ports[0]}", "upstream": f"{host}:{ports[0]}",
                                  "process": None, "control": None}
    return nodes


# Seconds a graceful stop gives a wave of nodes before SIGKILL (see `shutdown_waves`).
BROKER_GRACE_S = 15.0
CONTROLLER_GRACE_S = 5.0


def shutdown_waves(nodes: Iterable[Mapping[str, Any]]) -> list[tuple[list[Mapping[str, Any]], float]]:
    """Pure: the order to stop a cluster's nodes in, as (nodes, grace seconds) waves stopped one after
    the other: brokers first, then the nodes that are controllers (dedicated or combined). A KRaft
    broker's controlled shutdown waits for a live controller; stopped together with it, it waits out
    its whole grace. The controllers stop together, so the last of them never finishes a controlled
    shutdown (no quorum is left to acknowledge it): they get a short grace."""
    nodes = list(nodes)
    brokers = [n for n in nodes if "controller" not in n["roles"]]
    controllers = [n for n in nodes if "controller" in n["roles"]]
    return [(wave, grace) for wave, grace in ((brokers, BROKER_GRACE_S), (controllers, CONTROLLER_GRACE_S)) if wave]


SUBNET_PREFIX = "10.77"  # local clusters: 10.77.<slot>.0/24, a /30 per node
COMPOSE_SUBNET_PREFIX = "10.79"  # compose clusters: a bridge on 10.79.<slot>.0/24 (compose/'s own defaults are 10.78.x)
MAX_SLOTS = 250


def routed_slots(destinations: Iterable[str]) -> set[int]:
    """Pure: the cluster slots whose subnets (local or compose, /24 each) already hold one of this host's
    route `destinations` (`ip route` dst: `10.79.1.0/24`, `10.79.1.1`, `default`, ...).

    Such a subnet is taken whatever kafkaproof's state files say: a bridge a killed Docker engine left
    behind keeps its route, and a new bridge on the same subnet loses every packet to it. A wider
    route (a VPN's 10.0.0.0/8) does not count: the cluster's own /24 is more specific and wins."""
    ranges = [ipaddress.ip_network(f"{prefix}.0.0/16") for prefix in (SUBNET_PREFIX, COMPOSE_SUBNET_PREFIX)]
    slots: set[int] = set()
    for dst in destinations:
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:  # `default` and the like
            continue
        if net.version == 4 and net.prefixlen >= 24 and any(net.subnet_of(r) for r in ranges):
            slots.add(net.network_address.packed[2])
    return slots


@dataclass(frozen=True)
class NodeLink:
    """One node's network attachment."""

    namespace: str
    veth_host: str
    host_ip: str  # root-namespace side of the /30 (clients reach the node from here)
    node_ip: str  # the node's own address

    def to_json(self) -> dict:
        return self.__dict__.copy()

    @staticmethod
    def from_json(d: dict) -> "NodeLink":
        return NodeLink(**d)


def plan_link(slot: int, position: int, node_id: int) -> NodeLink:
    """Pure: the names and addresses of a node's link (see module docstring)."""
    if not 1 <= slot <= MAX_SLOTS:
        raise ClusterError(f"cluster slot {slot} out of range 1..{MAX_SLOTS}")
    if not 0 <= position < 63:
        raise ClusterError("at most 63 nodes per cluster")
    base = 4 * position
    name = f"kp{slot}n{node_id}"
    return NodeLink(namespace=name, veth_host=f"{name}h", host_ip=f"{SUBNET_PREFIX}.{slot}.{base + 1}",
                    node_ip=f"{SUBNET_PREFIX}.{slot}.{base + 2}")


def cluster_config(data: dict, name: str, base: Path | None = None) -> ClusterConfig:
    """Pure: the cluster a resolved scenario asks for (`base`: the scenario file's directory, which a
    relative `compose_file` is relative to)."""
    c = data["cluster"]
    compose_file = c.get("compose_file")
    if compose_file and base is not None and not Path(compose_file).is_absolute():
        compose_file = str(base / compose_file)
    return ClusterConfig(name=name, brokers=c["brokers"], controllers=c["controllers"],
                         kafka_version=c["kafka_version"], broker_config=c["config"],
                         node_config={int(k): v for k, v in c["node_config"].items()},
                         proxy=bool(c.get("proxy", False)), backend=c.get("backend", "local"),
                         image=c.get("image"), compose_file=compose_file, clock=bool(c.get("clock", False)),
                         disk=bool(c.get("disk", False)), log_dirs=int(c.get("log_dirs", 1)),
                         features=cluster_features.pinned_features(c))
