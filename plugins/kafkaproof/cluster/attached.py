"""A team's own running Docker Compose project, attached as it is: process faults on its containers.

`AttachedCluster.up(project, name)` finds the project's containers through the engine by compose's own
label (`com.docker.compose.project=<project>`, any image), keeps those whose environment describes a
Kafka node (`attach_env.py`: bitnami `KAFKA_CFG_*`, apache/kafka and Confluent `KAFKA_*`) or whose
command runs a broker, reads each node's id, roles and listeners (from the environment, else from the
broker's own config file in the container: `attach_config.py`), picks the advertised listener a published port reaches as the address
clients on this host use, and checks it against the brokers' own metadata. Anything missing (no Kafka
container, an unreadable node id, a broker no published port reaches, a paused or exited container, a
broker the metadata names at another address) is refused, naming the container, before anything is
touched. The cluster is then recorded in kafkaproof's state as backend `attached`, with each
container's id.

Faults: kill/stop/pause/restart are `docker kill`/`stop`/`pause`/`restart`-by-start of the container
(`containers.ContainerNodes`, shared with the compose backend). Network faults (isolate, cut, partition,
cut_clients, packet loss, bandwidth) run nft/tc in the container's network namespace through a tools
container (`--network container:<name>`, labelled, `docker_engine.netns_command`), as the compose
backend's `engine` mode does; the peers' addresses are the containers' addresses on the project's
network, read from the engine at each fault (an attached project has no fixed addresses). With `proxy`,
kafkaproof's rewriting fault proxies (those of `external.py`) front the published client ports, so every
client connection crosses one, and proxy faults apply. Detaching (`cluster detach`, `cluster
down`, `down --all`, also after a crash, from the state file) heals every recorded fault, starts or
unpauses every container kafkaproof found running (never one it did not find), deletes only the topics
kafkaproof created and the consumer groups that committed only to them, and waits (up to 60 s) until
every broker is back in the cluster metadata, stops the proxies and removes any tools container a killed
command left. It never removes or stops for good a container, network or volume: the project is the team's.

Refused on attached projects: clock faults (kafkaproof does not start the project's JVMs, so cannot put
them under libfaketime), disk faults (the volumes are the engine's, no diskfs under them), network faults
on a container on several networks (the rules act on one interface), rolling upgrades and settings
changes (they would recreate the team's service). Not built yet: secured listeners.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from typing import Any, Callable, Collection, Mapping, Sequence

from ..errors import ClusterError, ClusterNotRunning
from ..spec.cluster import NodeLink
from ..spec.faults import CLOCK_KINDS, DISK_KINDS, NETWORK_KINDS, PROCESS_KINDS, PROXY_KINDS
from . import docker_engine as de
from . import host, network, procs, state
from .attach_config import read_config_file
from .attach_env import ConfigFile, client_listener, needs_config_file, read_kafka_env
from .containers import ContainerNodes
from .external import LOOPBACK, ExternalCluster, check_proxy_listen, discover_brokers, free_ports
from .proxies import front_with_proxies
from .heal import heal_recorded
from .state import ClusterState, ComposeEntry, NodeState

log = logging.getLogger(__name__)

BACKEND = "attached"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
DETACH_WAIT_S = 60.0
SUPPORTED = frozenset(PROCESS_KINDS) | frozenset(NETWORK_KINDS) | frozenset(PROXY_KINDS) | {"rolling_restart"}
NOT_YET = ("on an attached compose project process, network and proxy faults and rolling_restart (without config) "
           "are built; rolling_upgrade and settings changes would recreate your service, and clock and disk faults "
           "are refused (kafkaproof starts neither the project's JVMs nor its volumes; docs/compose.md)")
CLOCK_REASON = ("clock fault {kind!r}: an attached project's JVMs are the team's, started without libfaketime, so "
                "kafkaproof cannot move their clocks (clock faults need the local backend)")
DISK_REASON = ("disk fault {kind!r}: an attached project's volumes belong to the team and the Docker engine, with no "
               "diskfs under them (disk faults need the local backend)")
ROLL_REFUSED = ("an attached compose project's containers are restarted in place, never recreated: rolling them onto "
                "{what} would mean recreating your service with another image or environment, which is yours to do "
                "(`docker compose up -d`); a rolling_restart without `config` restarts each container as it is")
# Variables that say a container is a Kafka node (else it is another service of the project: an app, a UI).
_KAFKA_MARKERS = ("NODE_ID", "BROKER_ID", "PROCESS_ROLES", "LISTENERS", "ADVERTISED_LISTENERS")


def is_kafka_env(env: Mapping[str, str]) -> bool:
    """Pure: whether a container's environment configures a Kafka node, in any of the three conventions."""
    return any(f"{prefix}{m}" in env for prefix in ("KAFKA_", "KAFKA_CFG_") for m in _KAFKA_MARKERS)


def container_networks(inspected: Mapping[str, Any]) -> dict[str, str]:
    """Pure: {network name: IPv4 address} of a container (`docker inspect`), the networks it has an address on
    (none while it is stopped)."""
    networks = (inspected.get("NetworkSettings") or {}).get("Networks") or {}
    return {name: n["IPAddress"] for name, n in sorted(networks.items()) if (n or {}).get("IPAddress")}


def engine_link(container: str, container_id: str, ip: str) -> NodeLink:
    """Pure: how network faults reach a container of an attached project: its network namespace entered through
    the engine (`docker:<name>`, or its id when the name is not one `network` accepts), at address `ip`; no
    host-side veth (the engine's bridge is not kafkaproof's)."""
    target = container if network.ENGINE_NS_RE.match(f"docker:{container}") else container_id[:12].lower()
    return NodeLink(namespace=f"docker:{target}", veth_host="", host_ip="", node_ip=ip)


def runs_kafka(inspected: Mapping[str, Any]) -> bool:
    """Pure: whether a container's command runs a Kafka broker from a config file (no Kafka environment
    needed: a team's image that bakes or mounts its own server.properties)."""
    config = inspected.get("Config") or {}
    words = [inspected.get("Path") or "", *(inspected.get("Args") or []), *(config.get("Entrypoint") or []),
             *(config.get("Cmd") or [])]
    return any("kafka.Kafka" in w or "kafka-server-start" in w for w in words)


def published_ports(inspected: Mapping[str, Any]) -> dict[int, int]:
    """Pure: {container port: host port} of a container's published TCP ports (`docker inspect`)."""
    out: dict[int, int] = {}
    for key, bindings in ((inspected.get("NetworkSettings") or {}).get("Ports") or {}).items():
        port, _, proto = key.partition("/")
        for b in bindings or []:
            if proto == "tcp" and b.get("HostPort"):
                out.setdefault(int(port), int(b["HostPort"]))
    return out


def plan_attached_nodes(project: str, inspected: Sequence[Mapping[str, Any]],
                        read_config: Callable[[str], ConfigFile] | None = None) -> list[dict[str, Any]]:
    """Pure but for `read_config` (container name -> its broker config file, asked only of a running
    container whose environment leaves out the node id, roles or listeners): the state-file nodes of a
    compose project's Kafka containers (`docker inspect` of every container of the project), ordered by
    node id; ClusterError naming each container and what is missing."""
    nodes, problems, seen = [], [], {}
    for c in inspected:
        name = c["Name"].lstrip("/")
        env = dict(item.partition("=")[::2] for item in (c.get("Config") or {}).get("Env") or [])
        if not (is_kafka_env(env) or runs_kafka(c)):
            continue
        status = (c.get("State") or {}).get("Status")
        if status != "running" or (c.get("State") or {}).get("Paused"):
            problems.append(f"container {name}: is {status}, not running; start it (`docker compose -p {project} "
                            f"up -d`) before attaching")
            continue
        try:
            config = read_config(name) if read_config and needs_config_file(env) else None
            kenv = read_kafka_env(env, f"container {name}", config)
            addresses = container_networks(c)
            entry: dict[str, Any] = {"id": kenv.node_id, "roles": list(kenv.roles), "container": name,
                                     "service": (c.get("Config") or {}).get("Labels", {}).get(SERVICE_LABEL),
                                     "link": None, "status": "running", "ip": next(iter(addresses.values()), None),
                                     "networks": sorted(addresses),
                                     "container_id": c["Id"], "log_dir": kenv.log_dir, "convention": kenv.convention,
                                     "config_file": config.path if config else None}
            controller = next((x for x in kenv.listeners if x.name in kenv.controller_listeners), None)
            entry["controller_port"] = controller.port if controller else None
            if kenv.is_broker:
                chosen = client_listener(kenv, published_ports(c), f"container {name}")
                entry.update(host=chosen.host, client_port=chosen.port, advertised_host=chosen.host,
                             advertised_port=chosen.port, listener=chosen.name)
            else:
                entry["host"] = entry["ip"] or ""
        except ClusterError as e:
            problems.append(str(e))
            continue
        if kenv.node_id in seen:
            problems.append(f"container {name}: node id {kenv.node_id} is also container {seen[kenv.node_id]}'s")
            continue
        seen[kenv.node_id] = name
        nodes.append(entry)
    if problems:
        raise ClusterError(f"compose project {project!r} cannot be attached:\n  " + "\n  ".join(problems))
    if not any("broker" in n["roles"] for n in nodes):
        raise ClusterError(f"compose project {project!r} has no Kafka broker container (none of its "
                           f"{len(inspected)} containers sets KAFKA_NODE_ID/KAFKA_CFG_NODE_ID and broker roles); "
                           f"is it running (`docker compose ls`)?")
    return sorted(nodes, key=lambda n: n["id"])


def metadata_problems(nodes: Sequence[Mapping[str, Any]], brokers: Mapping[int, tuple[str, int]]) -> list[str]:
    """Pure: where the brokers' metadata ({id: (host, port)}) disagrees with the containers' nodes."""
    problems = []
    ours = {n["id"]: n for n in nodes if "broker" in n["roles"]}
    for bid, n in sorted(ours.items()):
        if bid not in brokers:
            problems.append(f"broker {bid} (container {n['container']}) is not in the cluster metadata")
        elif tuple(brokers[bid]) != (n["advertised_host"], n["advertised_port"]):
            problems.append(f"broker {bid} (container {n['container']}): metadata names {brokers[bid][0]}:"
                            f"{brokers[bid][1]}, its environment {n['advertised_host']}:{n['advertised_port']}")
    for bid in sorted(set(brokers) - set(ours)):
        problems.append(f"broker {bid} at {brokers[bid][0]}:{brokers[bid][1]} is in the metadata but is no "
                        f"container of the project")
    return problems


def project_containers(project: str) -> list[dict[str, Any]]:
    """`docker inspect` of every container (any state) labelled with the compose project `project`."""
    ids = de.docker("ps", "-a", "--filter", f"label={PROJECT_LABEL}={project}", "--format", "{{.ID}}").stdout.split()
    return json.loads(de.docker("inspect", "--type", "container", *ids).stdout) if ids else []


def inspect_project(project: str, timeout_s: float = 15.0) -> dict[str, Any]:
    """Read-only: the project's Kafka nodes (ids, roles, containers, addresses) checked against the brokers'
    metadata, and the cluster id. Nothing is recorded or changed."""
    de.ensure_engine()
    nodes = plan_attached_nodes(project, project_containers(project), read_config_file)
    bootstrap = ",".join(f"{n['advertised_host']}:{n['advertised_port']}" for n in nodes if "broker" in n["roles"])
    brokers, cluster_id = discover_brokers(bootstrap, timeout_s)
    problems = metadata_problems(nodes, brokers)
    if problems:
        raise ClusterError(f"compose project {project!r}: its containers and the brokers' metadata disagree:\n  "
                           + "\n  ".join(problems))
    return {"project": project, "engine": de.engine_url(), "cluster_id": cluster_id, "bootstrap": bootstrap,
            "nodes": nodes}


class AttachedCluster(ContainerNodes, ExternalCluster):
    """A team's compose project, attached. Use `AttachedCluster.up(project, name)`, or `backend.attach(name)`."""

    backend = BACKEND

    def __init__(self, name: str):
        super().__init__(name)
        st = state.load_state(name)
        if st.engine:
            de.bind_engine(st.engine)

    @staticmethod
    def supported_for() -> frozenset[str]:
        """The fault kinds an attached project supports (before attaching: its containers not known yet)."""
        return SUPPORTED

    @property
    def supported_faults(self) -> frozenset[str]:  # type: ignore[override]
        """Process, network and proxy faults; no network faults when a node's container is on several networks."""
        return SUPPORTED - frozenset(NETWORK_KINDS) if self._multi_network() else SUPPORTED

    def _multi_network(self) -> list[str]:
        return [f"{n.container} ({', '.join(n.extra['networks'])})" for n in self.state().nodes
                if len(n.extra.get("networks") or []) > 1]

    def unsupported_reason(self, kind: str) -> str:
        if kind in CLOCK_KINDS:
            return CLOCK_REASON.format(kind=kind)
        if kind in DISK_KINDS:
            return DISK_REASON.format(kind=kind)
        if kind in NETWORK_KINDS and self._multi_network():
            return (f"network fault {kind!r}: containers {', '.join(self._multi_network())} are on several networks, "
                    f"and the rules act on one interface (eth0); give each Kafka container one network")
        return f"fault {kind!r}: {NOT_YET}"

    # --- rolling restarts: each container restarted in place (`faults/families/rolling.py`) ----------------------
    def roll_refused(self, version: str | None, settings: Mapping[str, Any]) -> str | None:
        """Refused: another Kafka version or settings (the team's service would have to be recreated)."""
        return attached_roll_refused(version, settings)

    def start_node_as(self, node_id: int, version: str | None, settings: Mapping[str, Any]) -> None:
        """Start the stopped container again as it was (a roll's step); anything else is refused."""
        refused = attached_roll_refused(None if version == self.node_version(node_id) else version, settings)
        if refused:
            raise ClusterError(refused)
        self.start_node(node_id)

    @classmethod
    def up(cls, project: str, name: str, timeout_s: float = 30.0, proxy: bool = False,  # type: ignore[override]
           proxy_host: str = LOOPBACK) -> "AttachedCluster":
        """Attach to the running compose project `project` as cluster `name`: found, checked, recorded; with
        `proxy`, a rewriting fault proxy (listening on `proxy_host`) in front of each published client port."""
        if state.state_path(name).exists():
            raise ClusterError(f"a cluster named {name!r} is already up; `kafkaproof cluster detach --name {name}` "
                               f"first")
        proxy_host = check_proxy_listen(proxy_host)
        found = inspect_project(project, timeout_s)
        nodes = found["nodes"]
        if proxy:
            front_with_proxies(nodes, proxy_host, free_ports(proxy_host, sum("broker" in n["roles"] for n in nodes)))
        if de.docker("image", "inspect", de.tools_image(), check=False).returncode != 0:
            log.warning("the tools image %s is not on %s: network faults on the project need it "
                        "(`bash scripts/docker-image.sh --base`)", de.tools_image(), found["engine"])
        with state.locked(name):
            st = ClusterState(name=name, backend=BACKEND, network="engine", engine=found["engine"], proxy=proxy,
                              bootstrap=found["bootstrap"], cluster_id=found["cluster_id"], kafka_version=None,
                              compose=ComposeEntry(project, [], ""),
                              nodes=[NodeState.from_json(n) for n in nodes], faults=[],
                              created_wall=time.time())
            state.save_state(name, st)
        cluster = cls(name)
        if proxy:
            try:
                for nid in cluster.proxy_ids():
                    cluster.start_proxy(nid)
                cluster.wait_ready(timeout_s)
            except BaseException:
                log.error("the fault proxies in front of compose project %s did not start; detaching", project)
                cluster.down(keep_logs=True)
                raise
        log.info("attached compose project %s as cluster %s: nodes %s, clients use %s", project, name,
                 [(n["id"], n["container"]) for n in nodes], cluster.bootstrap_servers())
        return cluster

    def node_link(self, node_id: int) -> NodeLink | None:
        """How network faults reach the node's container: through the engine, at its address on the project's
        network now (a container started again may get another), else the one recorded; None for a container on
        several networks (no network faults there) or one that is gone."""
        node = self.node(node_id)
        if len(node.extra.get("networks") or []) > 1:
            return None
        proc = de.docker("inspect", "--type", "container", node.container, check=False)
        if proc.returncode != 0:
            return None
        inspected = json.loads(proc.stdout)[0]
        ip = next(iter(container_networks(inspected).values()), None) or node.ip
        if not ip:
            return None
        if ip != node.ip:
            with state.update_node(self.name, node_id) as n:
                n.ip = ip
        return engine_link(node.container, inspected["Id"], ip)

    # --- detaching ----------------------------------------------------------------
    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Detach: heal every fault (stopped containers started, paused ones unpaused), delete kafkaproof's own
        topics and groups, wait until every broker is back in the metadata, forget the cluster. The project's
        containers, networks and volumes stay; the state file stays too when a container cannot be started,
        so `cluster detach` can try again."""
        try:
            st = state.load_state(self.name)
        except ClusterNotRunning:
            return
        procs.stop_for_cluster(self.name)
        errors: list[str] = []
        try:
            heal_recorded(self, restart_nodes=True)
        except Exception as e:  # the sweep below still brings every container back
            errors.append(f"healing the recorded faults: {e}")
        self.stop_proxies()
        for n in st.nodes:
            errors += self._restore(n)
        try:
            de.remove_tools([n.container for n in st.nodes] + [n.extra.get("container_id", "")[:12] for n in st.nodes
                                                              if n.extra.get("container_id")])
        except ClusterError as e:
            errors.append(f"removing kafkaproof's tools containers: {e}")
        if errors:
            raise ClusterError(f"attached project {st.compose.project}: could not restore " + "; ".join(errors))
        self.wait_brokers_back(DETACH_WAIT_S)
        self._delete_own(st)
        if keep_logs:
            for n in st.nodes:
                self._save_log(n)
        self._admin = None
        host.forget_cluster(self.name)
        if not keep_logs:
            shutil.rmtree(state.cluster_dir(self.name), ignore_errors=True)
        log.info("detached from compose project %s (cluster %s): its containers run as found", st.compose.project,
                 self.name)

    detach = down

    def _restore(self, node: NodeState) -> list[str]:
        """Bring one container back as kafkaproof found it (running); never touches a container it did not find."""
        inspected = de.docker("inspect", "--type", "container", "--format", "{{.Id}}", node.container, check=False)
        if inspected.returncode != 0:
            return [f"container {node.container} is gone (removed outside kafkaproof)"]
        if inspected.stdout.strip() != node.extra.get("container_id"):
            log.warning("container %s was recreated outside kafkaproof (not the container attached)", node.container)
        try:
            self.resume_node(node.id)
            self.start_node(node.id)
        except ClusterError as e:
            return [f"container {node.container}: {e}"]
        return []

    def wait_brokers_back(self, timeout_s: float = DETACH_WAIT_S) -> None:
        """Until every broker of the project is in the cluster metadata again (a killed broker re-registers a
        few seconds after its container started); ClusterError naming those missing after `timeout_s`."""
        expected = set(self.broker_ids())
        deadline = time.monotonic() + timeout_s
        last = "nothing yet"
        while True:
            try:
                missing = expected - self.registered_brokers()
                if not missing:
                    return
                last = f"brokers {sorted(missing)} not registered"
            except ClusterError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise ClusterError(f"attached cluster {self.name}: not every broker is back after {timeout_s:.0f}s "
                                   f"({last}); see {self.log_hint(self.broker_ids()[0])}")
            self._admin = None  # a fresh client: the old one may hold a connection to the restarted broker
            time.sleep(0.5)

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Any = None, timeout_s: float = 30.0) -> None:
        """Create a run's topic (refused when it exists: it is the team's), recorded so detaching deletes it."""
        if topic in self.metadata().topics:
            return super().create_topic(topic, partitions, replication_factor, config, timeout_s)  # refuses it
        with state.update_state(self.name) as st:
            st.extra["own_topics"] = sorted(set(st.extra.get("own_topics", [])) | {topic})
        super().create_topic(topic, partitions, replication_factor, config, timeout_s)

    def _delete_own(self, st: ClusterState) -> None:
        """Delete the topics kafkaproof created, and the consumer groups whose committed offsets are only on them."""
        topics = list(st.extra.get("own_topics", []))
        if not topics:
            return
        admin = self.admin()
        groups = own_groups(admin, set(topics))
        if groups:
            for g, fut in admin.delete_consumer_groups(groups, request_timeout=15).items():
                try:
                    fut.result(timeout=20)
                except Exception as e:  # a group still in use stays: report it, go on
                    log.warning("consumer group %s not deleted: %s", g, e)
        existing = set(self.metadata().topics)
        gone = [t for t in topics if t in existing]
        for t, fut in (admin.delete_topics(gone, operation_timeout=15) if gone else {}).items():
            try:
                fut.result(timeout=20)
            except Exception as e:
                log.warning("topic %s not deleted: %s", t, e)
        log.info("deleted kafkaproof's topics %s and groups %s", gone, groups)

    # --- nodes and views ----------------------------------------------------------------
    def _metadata_dir(self, node: NodeState) -> str:
        return node.extra.get("log_dir") or "/var/lib/kafka/data"

    def controller_ids(self) -> list[int]:
        return [n.id for n in self.state().nodes if n.is_controller]

    def active_controller(self) -> int | None:
        """The KRaft quorum leader (the quorum-state file inside the controllers' containers)."""
        from .base import StatefulCluster
        return StatefulCluster.active_controller(self)

    def wait_node_listening(self, node_id: int, timeout_s: float = 60.0) -> None:
        from .base import StatefulCluster
        return StatefulCluster.wait_node_listening(self, node_id, timeout_s)

    def direct_bootstrap(self, avoid: Collection[int] = ()) -> str:
        """The brokers' published client addresses (never through the fault proxies)."""
        return self.state().bootstrap

    def node_status(self, node: NodeState) -> dict[str, Any]:
        node_state = self.node_state(node.id)
        return {"id": node.id, "roles": node.roles, "address": node.address, "namespace": None,
                "container": node.container, "service": node.service, "pid": None, "state": node_state,
                "alive": node_state == "running", "paused": node_state == "paused"}

    def status_fields(self, st: ClusterState) -> dict[str, Any]:
        return {"backend": BACKEND, "kafka_version": None, "project": st.compose.project, "network": "engine",
                "engine": st.engine}


def attached_roll_refused(version: str | None, settings: Mapping[str, Any]) -> str | None:
    """Pure: why an attached project cannot be rolled onto `version` (None: the same) with `settings`, or None."""
    what = " and ".join(x for x in ((f"Kafka {version}" if version else ""),
                                     (f"settings {dict(settings)}" if settings else "")) if x)
    return ROLL_REFUSED.format(what=what) if what else None


def own_groups(admin, topics: set[str]) -> list[str]:
    """The consumer groups whose committed offsets are all on `topics` (kafkaproof's), never a team's group."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    out = []
    for g in sorted(x.group_id for x in listed.valid):
        try:
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                    request_timeout=15)[g].result(timeout=20)
        except Exception as e:  # cannot tell: leave it
            log.info("consumer group %s left alone (offsets unreadable: %s)", g, e)
            continue
        committed = {tp.topic for tp in res.topic_partitions or []}
        if committed and committed <= topics:
            out.append(g)
    return out
