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
(`containers.ContainerNodes`, shared with the compose backend). Detaching (`cluster detach`, `cluster
down`, `down --all`, also after a crash, from the state file) heals every recorded fault, starts or
unpauses every container kafkaproof found running (never one it did not find), deletes only the topics
kafkaproof created and the consumer groups that committed only to them, and waits (up to 60 s) until
every broker is back in the cluster metadata. It never removes or stops for good a container, network
or volume: the project is the team's.

Not built yet on attached projects: network and proxy faults, rolling upgrades and settings changes,
clock and disk faults, secured listeners.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from typing import Any, Callable, Collection, Mapping, Sequence

from ..errors import ClusterError, ClusterNotRunning
from ..spec.faults import PROCESS_KINDS
from . import docker_engine as de
from . import host, procs, state
from .attach_config import read_config_file
from .attach_env import ConfigFile, client_listener, needs_config_file, read_kafka_env
from .containers import ContainerNodes
from .external import ExternalCluster, discover_brokers
from .heal import heal_recorded
from .state import ClusterState, ComposeEntry, NodeState

log = logging.getLogger(__name__)

BACKEND = "attached"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
DETACH_WAIT_S = 60.0
SUPPORTED = frozenset(PROCESS_KINDS) | {"rolling_restart"}
NOT_YET = (f"on an attached compose project only process faults ({', '.join(PROCESS_KINDS)}) and rolling_restart "
           f"are built so far; network, proxy, clock and disk faults and rolling_upgrade are not (docs/compose.md)")
ROLL_REFUSED = ("an attached compose project's containers are restarted in place, never recreated: rolling them onto "
                "{what} would mean recreating your service with another image or environment, which is yours to do "
                "(`docker compose up -d`); a rolling_restart without `config` restarts each container as it is")
# Variables that say a container is a Kafka node (else it is another service of the project: an app, a UI).
_KAFKA_MARKERS = ("NODE_ID", "BROKER_ID", "PROCESS_ROLES", "LISTENERS", "ADVERTISED_LISTENERS")


def is_kafka_env(env: Mapping[str, str]) -> bool:
    """Pure: whether a container's environment configures a Kafka node, in any of the three conventions."""
    return any(f"{prefix}{m}" in env for prefix in ("KAFKA_", "KAFKA_CFG_") for m in _KAFKA_MARKERS)


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
            entry: dict[str, Any] = {"id": kenv.node_id, "roles": list(kenv.roles), "container": name,
                                     "service": (c.get("Config") or {}).get("Labels", {}).get(SERVICE_LABEL),
                                     "link": None, "status": "running",
                                     "container_id": c["Id"], "log_dir": kenv.log_dir, "convention": kenv.convention,
                                     "config_file": config.path if config else None}
            controller = next((x for x in kenv.listeners if x.name in kenv.controller_listeners), None)
            entry["controller_port"] = controller.port if controller else None
            if kenv.is_broker:
                chosen = client_listener(kenv, published_ports(c), f"container {name}")
                entry.update(host=chosen.host, client_port=chosen.port, advertised_host=chosen.host,
                             advertised_port=chosen.port, listener=chosen.name)
            else:
                networks = (c.get("NetworkSettings") or {}).get("Networks") or {}
                entry["host"] = next((n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), "")
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
    supported_faults = SUPPORTED

    def __init__(self, name: str):
        super().__init__(name)
        st = state.load_state(name)
        if st.engine:
            de.bind_engine(st.engine)

    @staticmethod
    def supported_for() -> frozenset[str]:
        """The fault kinds an attached project supports."""
        return SUPPORTED

    def unsupported_reason(self, kind: str) -> str:
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

    def node_log_since_start(self, node_id: int) -> str:
        """The container's output since its latest start (`docker logs --since StartedAt`): earlier starts'
        lines (a fatal line of last week) do not count."""
        started = self._inspect_state(node_id).get("StartedAt")
        proc = de.docker("logs", *(["--since", started] if started else []), self.node(node_id).container,
                         check=False, timeout=60)
        return proc.stdout + proc.stderr if proc.returncode == 0 else ""

    @classmethod
    def up(cls, project: str, name: str, timeout_s: float = 30.0) -> "AttachedCluster":  # type: ignore[override]
        """Attach to the running compose project `project` as cluster `name`: found, checked, recorded."""
        if state.state_path(name).exists():
            raise ClusterError(f"a cluster named {name!r} is already up; `kafkaproof cluster detach --name {name}` "
                               f"first")
        found = inspect_project(project, timeout_s)
        with state.locked(name):
            st = ClusterState(name=name, backend=BACKEND, network="engine", engine=found["engine"],
                              bootstrap=found["bootstrap"], cluster_id=found["cluster_id"], kafka_version=None,
                              compose=ComposeEntry(project, [], ""),
                              nodes=[NodeState.from_json(n) for n in found["nodes"]], faults=[],
                              created_wall=time.time())
            state.save_state(name, st)
        cluster = cls(name)
        log.info("attached compose project %s as cluster %s: nodes %s, clients use %s", project, name,
                 [(n["id"], n["container"]) for n in found["nodes"]], found["bootstrap"])
        return cluster

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
        for n in st.nodes:
            errors += self._restore(n)
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
        """The brokers' published client addresses (no proxies on an attached project)."""
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
