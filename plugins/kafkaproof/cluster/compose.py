"""The compose cluster backend: Kafka nodes as containers of a Docker Compose project, as the seeds run them.

`ComposeCluster.up(config)` picks the compose file of `compose/` for the topology (2 or 3
combined nodes, 3 brokers and a dedicated controller), writes an override file with the
scenario's broker settings (apache/kafka environment names: `foo.bar` -> `KAFKA_FOO_BAR`),
gives the project its own /24 bridge subnet, image and KRaft cluster id, and runs
`docker compose up -d`. Everything is recorded in a state file first, like the local
backend's, so `kafkaproof cluster down --all` removes a crashed run's containers, network
and volumes (and only those: everything carries the label `io.kafkaproof.cluster=<project>`,
the project being `<name>-<state id>` (`compose_project`), so another state directory's cluster
of the same name on the same engine is never touched).

Faults: `kill`/`stop`/`pause`/`restart` are `docker kill`/`stop`/`pause`/`start`; network
faults run nft/tc inside the container's network namespace, so `network.py` and the fault
injector act unchanged. How they get in is the cluster's `network` mode (`network_faults_mode`):
`netns` (root, engine on this machine) names the namespace `kp<slot>n<id>` like a local node's
(`docker_engine.attach_netns`, again after every start) and also shapes the host end of its
link; `engine` (an engine elsewhere, or no root) enters it with a tools container sharing the
container's network (`docker_engine.netns_command`, what Airflow's DockerOperator does with
`network_mode="container:<name>"`). The state file records the engine, so every later
command, `cluster down --all` too, goes to the engine the cluster runs on. Proxy faults put
kafkaproof's rewriting proxies (those of `external.py`) in front of the containers' CLIENT
listeners, while kafkaproof's own clients use the INTERNAL listeners. A node's log is its
container's output (`docker logs`).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Mapping

from ..errors import ClusterError, ClusterNotRunning, FaultError
from ..spec.cluster import COMPOSE_SUBNET_PREFIX, ClusterConfig, NodeLink, compose_topology, new_cluster_id
from ..spec.fault_families import kinds_needing
from ..spec.faults import CLOCK_KINDS, CORRUPTION_KINDS, DISK_KINDS, FAULT_KINDS, QUORUM_KINDS
from . import docker_engine as de
from . import host, network, state
from .base import StatefulCluster
from .containers import ContainerNodes
from .proxies import front_with_proxies
from .external import free_ports
from .state import ClusterState, ComposeEntry, NodeState

log = logging.getLogger(__name__)

CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT = 9092, 9093, 9094
DATA_DIR = "/var/lib/kafka/data"


def compose_project(cluster: str) -> str:
    """The compose project (and label value, container name prefix) of cluster `cluster`: its name and the
    state directory's id, so that two state directories' clusters of one name never share containers."""
    return f"{cluster}-{state.state_id()}"


def env_name(prop: str) -> str:
    """Pure: the apache/kafka image's environment name of a broker property (`foo.bar` -> `KAFKA_FOO_BAR`,
    `_` -> `__`, `-` -> `___`)."""
    return "KAFKA_" + prop.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def plan_nodes(config: ClusterConfig, project: str, prefix: str) -> list[dict[str, Any]]:
    """Pure: the state-file nodes of a compose topology (service, container, fixed bridge IP, listeners)."""
    combined = config.controllers == 0
    nodes = []
    for i in range(1, config.brokers + 1):
        nodes.append({"id": i, "roles": ["broker", "controller"] if combined else ["broker"],
                      "service": f"kafka{i}", "ip": f"{prefix}.{10 + i}"})
    for j in range(1, config.controllers + 1):
        nodes.append({"id": 100 + j, "roles": ["controller"], "service": f"controller{j}", "ip": f"{prefix}.{20 + j}"})
    for n in nodes:
        n.update(container=f"{project}-{n['service']}", host=n["ip"], client_port=CLIENT_PORT,
                 internal_port=INTERNAL_PORT, controller_port=CONTROLLER_PORT, advertised_host=n["ip"],
                 advertised_port=CLIENT_PORT, link=None, status="running")
    return nodes


def override_yaml(config: ClusterConfig, nodes: list[dict[str, Any]]) -> str:
    """Pure: the override compose file giving every node the cluster's broker settings and its own."""
    import yaml
    services = {}
    for n in nodes:
        settings = {**config.broker_config, **config.node_config.get(n["id"], {})}
        if "broker" not in n["roles"]:  # broker-only settings would stop a dedicated controller
            settings = dict(config.node_config.get(n["id"], {}))
        env = {env_name(k): _env_value(v) for k, v in sorted(settings.items())}
        if env:
            services[n["service"]] = {"environment": env}
    return yaml.safe_dump({"services": services} if services else {"services": {}}, sort_keys=True)


def rolled_yaml(nodes: list[dict[str, Any]]) -> str:
    """Pure: the compose file that gives each node a rolling fault changed its image and settings
    (`rolled.yml`, last of the project's files, so it wins over the base file and the override)."""
    import yaml
    services = {}
    for n in nodes:
        if n.get("image") or n.get("settings"):
            svc: dict[str, Any] = {"image": n["image"]} if n.get("image") else {}
            if n.get("settings"):
                svc["environment"] = {env_name(k): _env_value(v) for k, v in sorted(n["settings"].items())}
            services[n["service"]] = svc
    return yaml.safe_dump({"services": services}, sort_keys=True)


def compose_model_problems(model: Mapping[str, Any], nodes: list[dict[str, Any]], project: str) -> list[str]:
    """Pure: what in a resolved compose model (`docker compose config --format json`) breaks the
    conventions kafkaproof relies on: a service per node with its container name, its fixed address
    and the cluster label, and that label on every service, network and volume (so teardown finds them)."""
    problems: list[str] = []
    services = model.get("services") or {}
    label = de.CLUSTER_LABEL
    for n in nodes:
        svc = services.get(n["service"])
        if svc is None:
            problems.append(f"services.{n['service']}: missing (node {n['id']}; this topology needs services "
                            f"{', '.join(x['service'] for x in nodes)})")
            continue
        if svc.get("container_name") != n["container"]:
            problems.append(f"services.{n['service']}.container_name: {svc.get('container_name')!r}, must be "
                            f"'${{KAFKAPROOF_CLUSTER}}-{n['service']}' ({n['container']!r} here)")
        addresses = [(net or {}).get("ipv4_address") for net in (svc.get("networks") or {}).values()]
        if n["ip"] not in addresses:
            problems.append(f"services.{n['service']}.networks: no ipv4_address {n['ip']} "
                            f"('${{KAFKAPROOF_NET_PREFIX}}.{n['ip'].rsplit('.', 1)[1]}'); found {addresses}")
    for kind in ("services", "networks", "volumes"):
        for name, item in sorted((model.get(kind) or {}).items()):
            if (item or {}).get("external"):
                continue
            if ((item or {}).get("labels") or {}).get(label) != project:
                problems.append(f"{kind}.{name}.labels: needs {label}: ${{KAFKAPROOF_CLUSTER}} ({project!r} here), "
                                f"or `cluster down` could not find it")
    return problems


NETWORK_FAULTS_ENV = "KAFKAPROOF_COMPOSE_NETWORK_FAULTS"
NETWORK_FAULTS_MODES = ("auto", "netns", "engine")


def network_faults_mode(requested: str, engine_is_local: bool, can_netns: bool) -> str:
    """Pure: how network faults enter the containers: `netns` (named namespaces on this host: the engine
    runs here and we are root) or `engine` (tools containers through the engine API, anywhere)."""
    if requested not in NETWORK_FAULTS_MODES:
        raise ClusterError(f"{NETWORK_FAULTS_ENV}={requested!r}: allowed {', '.join(NETWORK_FAULTS_MODES)}")
    if requested == "netns" and not (engine_is_local and can_netns):
        raise ClusterError(f"{NETWORK_FAULTS_ENV}=netns needs root and the Docker engine on this machine "
                           f"(the engine is {'here' if engine_is_local else 'elsewhere'}, "
                           f"{'root' if can_netns else 'not root'}); use `engine` or `auto`")
    if requested == "auto":
        return "netns" if engine_is_local and can_netns else "engine"
    return requested


def corruption_refusal(engine: str) -> str | None:
    """Why `file_corrupt` cannot act on a compose cluster on `engine` (None: it can): it changes the files of a
    container's data volume on this host's disk, so the engine must run on this machine."""
    if de.is_local_engine(engine):
        return None
    return (f"fault 'file_corrupt' changes the files of a container's data volume on this host's disk, and the Docker "
            f"engine {engine} runs on another machine (its volumes are there): run the engine here, or use the "
            f"local backend")


def refusal(kind: str, engine: str | None = None) -> str | None:
    """Pure-ish: why a compose cluster (on `engine`, default: `DOCKER_HOST`'s) refuses a fault of `kind`, or None."""
    if kind in CLOCK_KINDS:
        return (f"clock fault {kind!r} needs the local backend (nodes started under libfaketime); "
                f"a compose cluster cannot move a container's clock")
    if kind in DISK_KINDS or kind in kinds_needing("disk"):
        return (f"disk fault {kind!r} needs the local backend (log directories on diskfs); a compose "
                f"cluster's volumes belong to the Docker engine")
    if kind in CORRUPTION_KINDS:
        return corruption_refusal(engine or de.engine_url())
    if kind in QUORUM_KINDS:
        return (f"quorum fault {kind!r} needs the local backend (a dynamic quorum, formatted by kafkaproof); "
                f"a compose cluster's quorum is static")
    return None


def _users_file(path: str) -> Path:
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ClusterError(f"cluster.compose_file {path}: no such file")
    return p


def _env_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


class ComposeCluster(ContainerNodes, StatefulCluster):
    """A running compose cluster. Use `ComposeCluster.up(config)`, or `backend.attach(name)`."""

    backend = "compose"

    def __init__(self, name: str):
        super().__init__(name)
        st = state.load_state(name)
        if st.backend != "compose":
            raise ClusterError(f"cluster {name!r} is not a compose cluster")
        if st.engine:
            de.bind_engine(st.engine)

    @property
    def supported_faults(self) -> frozenset[str]:
        """Every kind but clock, disk and quorum faults: network faults enter the containers by their namespaces
        or through the engine; `file_corrupt` changes the data volumes' files when the engine runs here."""
        return self.supported_for(self.state().engine)

    @staticmethod
    def supported_for(engine: str | None = None) -> frozenset[str]:
        """The fault kinds a compose cluster on `engine` (default: the one `DOCKER_HOST` names) supports."""
        kinds = (frozenset(FAULT_KINDS) - frozenset(CLOCK_KINDS) - frozenset(DISK_KINDS) - frozenset(kinds_needing("disk"))
                 - frozenset(QUORUM_KINDS))
        return kinds if corruption_refusal(engine or de.engine_url()) is None else kinds - frozenset(CORRUPTION_KINDS)

    def unsupported_reason(self, kind: str) -> str:
        return refusal(kind, self.state().engine) or f"fault {kind!r} is not supported on compose cluster {self.name}"

    def log_dir(self, node_id: int) -> Path:
        """The node's data volume as a directory of this host (where `file_corrupt` acts): the source of its
        container's mount at DATA_DIR (`docker inspect`). FaultError when the engine runs on another machine,
        or the volume is not a directory here (an engine in a VM)."""
        refused = corruption_refusal(self.state().engine)
        if refused:
            raise FaultError(refused)
        container = self.node(node_id).container
        mounts = de.container_mounts(container)
        source = next((m.get("Source") for m in mounts if m.get("Destination") == DATA_DIR), None)
        if not source:
            raise FaultError(f"container {container} mounts nothing at {DATA_DIR} (its log directory); file_corrupt "
                             f"acts on the data volume there")
        path = Path(source)
        if not path.is_dir():
            raise FaultError(f"the data volume of container {container} ({source}) is no directory of this host: the "
                             f"Docker engine keeps it elsewhere (a VM?); file_corrupt needs the engine on this machine")
        return path

    def disk_state(self, node_id: int) -> str:
        """A container's volume is no faulty disk: 'none' (its `disks` capability is absent)."""
        return "none"

    # --- lifecycle ------------------------------------------------------------
    @classmethod
    def up(cls, config: ClusterConfig, image: str | None = None) -> "ComposeCluster":
        """Start a compose cluster and return once every broker is registered and the quorum has a leader.

        The image: `image`, else the config's, else `$KAFKAPROOF_KAFKA_IMAGE` (pulled when the engine
        lacks it), else `kafkaproof/kafka:<kafka_version>` built locally. The subnet is the first slot's
        that no cluster of any state directory, namespace or route of this host uses (`claimed_slot`)."""
        config.validate()
        project = de.check_cluster(compose_project(config.name))
        if state.state_path(config.name).exists():
            raise ClusterError(f"a cluster named {config.name!r} is already up; `kafkaproof cluster down "
                               f"--name {config.name}` first")
        stem = compose_topology(config.brokers, config.controllers)
        engine = de.ensure_engine()
        mode = network_faults_mode(os.environ.get(NETWORK_FAULTS_ENV) or "auto", de.is_local_engine(engine),
                                   network.namespaces_supported())
        de.ensure_compose_cli()
        image = image or config.image or os.environ.get(de.KAFKA_IMAGE_ENV)
        image = de.ensure_pulled(image) if image else de.ensure_image(config.kafka_version)
        if mode == "engine":
            de.ensure_tools_image()
        t0 = time.monotonic()
        workdir = state.cluster_dir(config.name)
        with state.locked(config.name), host.claimed_slot(config.name, network.namespaces_supported()) as slot:
            prefix = f"{COMPOSE_SUBNET_PREFIX}.{slot}"
            nodes = plan_nodes(config, project, prefix)
            if config.proxy:  # the rewriting proxies of an existing cluster, before the CLIENT listeners
                front_with_proxies(nodes, "127.0.0.1", free_ports("127.0.0.1", config.brokers))
            override = workdir / "override.yml"
            override.write_text(override_yaml(config, nodes))
            base_file = _users_file(config.compose_file) if config.compose_file else de.compose_file(stem)
            st = ClusterState(name=config.name, backend="compose", slot=slot, cluster_id=new_cluster_id(),
                              network=mode, engine=engine, kafka_version=config.kafka_version, image=image,
                              proxy=config.proxy,
                              compose=ComposeEntry(project, [str(base_file), str(override)], prefix),
                              config=config.node_layout(), nodes=[NodeState.from_json(n) for n in nodes],
                              faults=[], created_wall=time.time())
            state.save_state(config.name, st)
        cluster = cls(config.name)
        try:
            de.remove_labelled(project)  # leftovers of a crashed run of the same name
            if config.compose_file:
                cluster._check_model(base_file)
            cluster._compose(["up", "-d", "--no-build"])
            for n in st.nodes:
                cluster._attach(n.id)
                if n.proxy:
                    cluster.start_proxy(n.id)
            cluster.wait_ready(config.start_timeout_s)
        except BaseException as e:
            log.error("compose cluster %s failed to start (%s: %s); tearing down", config.name, type(e).__name__, e)
            cluster._dump_log_tails()
            unreachable = isinstance(e, ClusterError) and cluster._unreachable_from_host()
            cluster._dump_reachability()
            cluster.down(keep_logs=True)
            if unreachable:
                raise ClusterError(f"{e}; every container runs, but this host reads no metadata from them on "
                                   f"{prefix}.0/24 (the reachability logged above says what it reaches; an engine "
                                   f"on another machine needs that subnet routed here: docs/compose.md)") from e
            raise
        log.info("compose cluster %s ready in %.1fs (%s, image %s)", config.name, time.monotonic() - t0, stem, image)
        return cluster

    def _check_model(self, path: Path) -> None:
        """Refuse a user's compose file that breaks our conventions, naming each field, before anything starts."""
        proc = self._compose(["config", "--format", "json"], check=False)
        if proc.returncode != 0:
            raise ClusterError(f"{path}: `docker compose config` rejects it: {proc.stderr.strip()[-1000:]}")
        st = self.state()
        problems = compose_model_problems(json.loads(proc.stdout), [n.to_json() for n in st.nodes], st.compose.project)
        if problems:
            raise ClusterError(f"{path}: not usable as a kafkaproof compose file (start from compose/"
                               f"{compose_topology(*self._layout())}.yml; docs/compose.md):\n  " + "\n  ".join(problems))

    def _layout(self) -> tuple[int, int]:
        layout = self.state().config  # `ClusterConfig.node_layout()`
        return layout["brokers"], layout["controllers"]

    def _compose(self, args: list[str], check: bool = True):
        st = self.state()
        c = st.compose
        env = {"KAFKA_IMAGE": st.image, "KAFKAPROOF_NET_PREFIX": c.net_prefix, "KAFKA_CLUSTER_ID": st.cluster_id}
        return de.compose(args, c.project, env=env, files=c.files, check=check)

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Heal every fault, remove the containers, network and volumes, the state file. Safe to repeat."""
        st = self._begin_down()
        if st is None:
            return
        self.stop_proxies()
        if keep_logs:
            for n in st.nodes:
                self._save_log(n)
        for n in st.nodes:
            if n.link and st.network == "netns":
                network.detach_netns(n.link.namespace)
        try:
            self._compose(["down", "-v", "--timeout", "10" if graceful else "0"], check=False)
            de.remove_labelled(st.compose.project)  # whatever compose did not know about
        except ClusterError as e:  # the state file stays: `cluster down` can try again
            raise ClusterError(f"compose cluster {self.name}: {e}") from e
        self._admin = None
        host.forget_cluster(self.name)
        if not keep_logs:
            shutil.rmtree(state.cluster_dir(self.name), ignore_errors=True)
        log.info("compose cluster %s is down", self.name)

    # --- nodes ----------------------------------------------------------------
    def _attach(self, node_id: int) -> None:
        """Record how network faults enter the node's container: its (new) namespace named here
        (`netns`), or the container itself, entered through the engine (`engine`)."""
        st, node = self.state(), self.node(node_id)
        host_ip = f"{st.compose.net_prefix}.1"
        if st.network == "netns":
            ns = f"kp{st.slot}n{node_id}"
            network.attach_netns(node.container, ns)
            link = NodeLink(namespace=ns, veth_host=network.host_veth(node.container), host_ip=host_ip, node_ip=node.ip)
        elif node.link:
            return  # the container keeps its name across restarts
        else:
            link = NodeLink(namespace=f"docker:{node.container}", veth_host="", host_ip=host_ip, node_ip=node.ip)
        with state.update_node(self.name, node_id) as n:
            n.link = link

    def start_node_as(self, node_id: int, version: str, settings: dict) -> None:
        """Recreate a stopped node's container on `version`'s image with `settings` in its environment
        (`rolled.yml`; the same data volume), and start it. Its output so far is kept beside its log."""
        st, node = self.state(), self.node(node_id)
        image = st.image if version == st.kafka_version else de.ensure_image(version)
        old = self.node_dir(node_id) / f"server.{node.recreated}.log"
        self._save_log(node, old)
        self._record_node_change(node_id, version, settings, image=image, recreated=node.recreated + 1)
        rolled = state.cluster_dir(self.name) / "rolled.yml"
        rolled.write_text(rolled_yaml([n.to_json() for n in self.state().nodes]))
        with state.update_state(self.name) as st:
            if str(rolled) not in st.compose.files:
                st.compose.files.append(str(rolled))
        self._compose(["up", "-d", "--no-deps", "--no-build", "--force-recreate", node.service])
        self._attach(node_id)
        log.info("node %d started (container %s, Kafka %s)", node_id, node.container, version)

    def _after_start(self, node_id: int) -> None:
        self._attach(node_id)

    def _metadata_dir(self, node: NodeState) -> str:
        return DATA_DIR

    # --- cluster-wide views ---------------------------------------------------
    def node_status(self, node: NodeState) -> dict[str, Any]:
        node_state = self.node_state(node.id)
        return {"id": node.id, "roles": node.roles, "address": node.address, "namespace": node.namespace,
                "container": node.container, "pid": None, "state": node_state,
                "alive": node_state == "running", "paused": node_state == "paused"}

    def status_fields(self, st: ClusterState) -> dict[str, Any]:
        return {"backend": "compose", "kafka_version": st.kafka_version, "image": st.image,
                "project": st.compose.project, "network": st.network, "engine": st.engine}

    def _dump_log_tails(self, lines: int = 15) -> None:
        try:
            nodes = self.state().nodes
        except ClusterNotRunning:
            return
        for n in nodes:
            proc = de.docker("logs", "--tail", str(lines), n.container, check=False)
            if proc.returncode == 0:
                log.error("last lines of node %d's log:\n%s", n.id, (proc.stdout + proc.stderr).strip())

    def _unreachable_from_host(self) -> bool:
        """Every node's container runs and still no broker answers this host's metadata request."""
        try:
            if any(self.node_state(n) != "running" for n in self.node_ids()):
                return False
            self.metadata()
            return False
        except ClusterError:
            return True

    def _dump_reachability(self) -> None:
        """Log whether this host reaches each node's listeners, the route it takes there and what the
        node listens on: a start that fails while every broker logs \"started\" is a network matter."""
        try:
            st = self.state()
        except ClusterNotRunning:
            return
        addresses = network.run(["ip", "-4", "-br", "addr"], check=False).stdout.strip().splitlines()
        lines = [f"host addresses: {' | '.join(addresses)}"]
        for n in st.nodes:
            ports = [n.client_port, n.internal_port] if n.is_broker else [n.controller_port]
            reach = ", ".join(f"{p} {tcp_reachable(n.ip, p)}" for p in ports)
            route = network.run(["ip", "route", "get", n.ip], check=False)
            lines.append(f"node {n.id} at {n.ip}: from this host {reach}; route: "
                         f"{(route.stdout or route.stderr).strip()}")
            try:
                inside = network.run(["nsenter", "-t", str(de.container_pid(n.container)), "-n",
                                      "sh", "-c", "ip -4 -br addr; ss -ltn"], check=False)
                lines.append(f"  inside: {' | '.join((inside.stdout + inside.stderr).strip().splitlines())}")
            except ClusterError as e:
                lines.append(f"  inside: {e}")
        log.error("reachability of compose cluster %s:\n%s", self.name, "\n".join(lines))


def tcp_reachable(host: str, port: int, timeout_s: float = 2.0) -> str:
    """'open', or why a TCP connection from this host to host:port failed (refused, timed out, ...)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return "open"
    except OSError as e:
        return type(e).__name__ if not e.strerror else e.strerror
