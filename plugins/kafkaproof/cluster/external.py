"""An existing Kafka cluster, reached by its bootstrap servers, optionally fronted by kafkaproof's fault proxies.

`ExternalCluster.up(bootstrap, name)` learns the brokers from metadata, starts one
fault proxy per broker on this host (unless `proxy=False`: then it only gives the
runner topic creation, snapshots and the drain through the same interface as a
local cluster) and records everything in a state file like a
local cluster's, so `kafkaproof cluster down --name NAME` (or `--all`) stops the
proxies and heals leftover rules after a crash. The proxies rewrite broker
addresses in Metadata/FindCoordinator/DescribeCluster answers to proxy addresses
(each proxy knows its peers), so every client connection crosses a proxy while
kafkaproof's own admin client and the audit drain use the bootstrap servers
directly.

Only proxy faults (and consumer faults) apply here: kafkaproof owns neither the
brokers' processes nor their network.

The proxies listen on loopback (127.0.0.1) unless told otherwise (`proxy_host`, the CLI's
`--proxy-listen`): a proxy in front of a team's cluster is a way into it, with faults.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import shutil
import socket
import time
from typing import Any, Collection, Mapping

from .. import logs
from ..errors import ClusterError
from ..spec.connection import PROXY_ON_TLS, security_protocol, uses_tls
from ..spec.faults import PROXY_KINDS
from . import host, state
from .base import StatefulCluster
from .proxies import front_with_proxies
from .state import ClusterState, NodeState

log = logging.getLogger(__name__)

AUTH_ERRORS = frozenset({"_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED"})
NOT_OWNED = ("kafkaproof does not own the brokers of an existing cluster: only proxy faults "
             f"({', '.join(PROXY_KINDS)}) and consumer faults apply")


def discover_brokers(bootstrap: str, timeout_s: float = 15.0, client_config: Mapping[str, Any] | None = None,
                     ) -> tuple[dict[int, tuple[str, int]], str | None]:
    """({broker id: (host, port)}, cluster id) from the metadata of `bootstrap`; ClusterError if unreachable.

    A failed authentication or TLS handshake fails at once with the broker's reason, not after `timeout_s`.
    """
    from confluent_kafka.admin import AdminClient
    refusals: list[str] = []  # librdkafka reports failed authentications and handshakes to error_cb only

    def on_error(err) -> None:
        if err.name() in AUTH_ERRORS:
            refusals.append(err.str())

    admin = AdminClient({**(client_config or {}), "bootstrap.servers": bootstrap, "error_cb": on_error,
                         "logger": logs.librdkafka_logger(), "log_level": 2})
    where = f"the existing cluster at {bootstrap} ({security_protocol(client_config or {})})"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            break
        except Exception as e:  # KafkaException: the message says what failed
            admin.poll(0)
            if refusals:
                raise ClusterError(f"{where} refused kafkaproof's client: {refusals[0]} (check the client config: "
                                   f"security.protocol, sasl.mechanism, user and password, ssl.ca.location)") from e
            if time.monotonic() >= deadline:
                raise ClusterError(f"cannot read metadata from {where}: {e}") from e
    if not md.brokers:
        raise ClusterError(f"the cluster at {bootstrap} reports no brokers")
    return {b.id: (b.host, b.port) for b in md.brokers.values()}, md.cluster_id


LOOPBACK = "127.0.0.1"


def check_proxy_listen(host: str) -> str:
    """Pure: the address the proxies in front of an existing cluster listen on and advertise to clients;
    ClusterError for what is not one IPv4 address (a wildcard cannot be advertised, and would listen on
    every interface)."""
    try:
        ip = ipaddress.ip_address(host.strip())
    except ValueError:
        raise ClusterError(f"--proxy-listen {host!r}: give an IPv4 address of this host that clients reach "
                           f"(default {LOOPBACK}: this host only)") from None
    if ip.version != 4 or ip.is_unspecified:
        raise ClusterError(f"--proxy-listen {host}: give one IPv4 address of this host that clients reach "
                           f"(default {LOOPBACK}: this host only); a wildcard would listen on every interface, and "
                           f"clients cannot be sent to it")
    return str(ip)


def free_ports(host: str, n: int) -> list[int]:
    """`n` distinct TCP ports free on `host` right now (bound, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def plan_proxied_nodes(brokers: dict[int, tuple[str, int]], proxy_host: str | None,
                       ports: list[int] | None = None) -> list[dict]:
    """Pure: state-file nodes of an existing cluster; with a `proxy_host`, one rewriting proxy
    per broker (at `ports`, in broker id order) that knows where its peers listen."""
    nodes = [{"id": bid, "roles": ["broker"], "host": brokers[bid][0], "client_port": brokers[bid][1],
              "advertised_host": brokers[bid][0], "advertised_port": brokers[bid][1],
              "link": None, "process": None, "status": "running"} for bid in sorted(brokers)]
    if proxy_host is not None:
        front_with_proxies(nodes, proxy_host, ports or [])
    return nodes


class ExternalCluster(StatefulCluster):
    """An existing cluster, optionally behind kafkaproof's fault proxies. Use `up(bootstrap, name)` or
    `backend.attach(name)`."""

    backend = "external"
    # kafkaproof owns neither the brokers' processes nor their network: proxy faults only.
    supported_faults = frozenset(PROXY_KINDS)

    def __init__(self, name: str):
        super().__init__(name)
        found = state.load_state(name).backend
        if found != self.backend:
            raise ClusterError(f"cluster {name!r} is a {found} cluster, not an {self.backend} one")

    @classmethod
    def up(cls, bootstrap: str, name: str, proxy: bool = True, proxy_host: str = LOOPBACK,
           timeout_s: float = 30.0, client_config: Mapping[str, Any] | None = None) -> "ExternalCluster":
        """Attach to the cluster at `bootstrap`, connecting with `client_config` (security settings,
        librdkafka names); with `proxy`, front it with one fault proxy per broker, listening on `proxy_host`
        (loopback unless told otherwise), and wait until clients get through them."""
        if state.state_path(name).exists():
            raise ClusterError(f"a cluster named {name!r} is already up; `kafkaproof cluster down --name {name}` first")
        client_config = dict(client_config or {})
        if proxy and uses_tls(client_config):
            raise ClusterError(PROXY_ON_TLS.format(protocol=security_protocol(client_config)))
        proxy_host = check_proxy_listen(proxy_host)
        brokers, cluster_id = discover_brokers(bootstrap, timeout_s, client_config)
        ports: list[int] = []
        if proxy:
            try:
                ports = free_ports(proxy_host, len(brokers))
            except OSError as e:
                raise ClusterError(f"the fault proxies cannot listen on {proxy_host} (--proxy-listen): {e}") from e
            if not ipaddress.ip_address(proxy_host).is_loopback:
                log.warning("the fault proxies listen on %s, beyond this host (--proxy-listen): whoever reaches "
                            "that address reaches the cluster at %s through them, faults included",
                            proxy_host, bootstrap)
        nodes = plan_proxied_nodes(brokers, proxy_host, ports) if proxy else plan_proxied_nodes(brokers, None)
        with state.locked(name):
            st = ClusterState(name=name, backend="external", network="external", proxy=proxy, bootstrap=bootstrap,
                              cluster_id=cluster_id, kafka_version=None, client_config=client_config,
                              nodes=[NodeState.from_json(n) for n in nodes], faults=[], created_wall=time.time())
            state.save_state(name, st)
        cluster = cls(name)
        try:
            for node in st.nodes:
                if node.proxy:
                    cluster.start_proxy(node.id)
            cluster.wait_ready(timeout_s)
        except BaseException:
            log.error("could not use the existing cluster at %s; stopping what was started", bootstrap)
            cluster.down(keep_logs=True)
            raise
        log.info("existing cluster at %s: brokers %s, clients use %s", bootstrap, sorted(brokers),
                 cluster.bootstrap_servers())
        return cluster

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Remove every rule, stop the proxies, remove the state file. The brokers are not touched."""
        st = self._begin_down()
        if st is None:
            return
        self.stop_proxies()
        host.forget_cluster(self.name)
        if not keep_logs:
            shutil.rmtree(state.cluster_dir(self.name), ignore_errors=True)
        log.info("existing cluster %s (%s) released%s", self.name, st.bootstrap,
                 ": its fault proxies are stopped" if st.proxy else "")

    # --- what kafkaproof does not own -------------------------------------------
    def node_state(self, node_id: int) -> str:
        """Brokers of an existing cluster count as running: kafkaproof cannot see their processes."""
        self.node(node_id)
        return "running"

    def unsupported_reason(self, kind: str) -> str:
        return NOT_OWNED

    def node_incarnation(self, node_id: int) -> str | None:
        return None

    # No `nodes`, `disks` or `clock` capability (they stay None): only the fault proxies are kafkaproof's.
    def disk_state(self, node_id: int) -> str:
        return "none"

    def wait_node_listening(self, node_id: int, timeout_s: float = 60.0) -> None:
        return None

    def controller_ids(self) -> list[int]:
        return []

    def active_controller(self) -> int | None:
        """The controller id the cluster reports (DescribeCluster), None if unknown."""
        with contextlib.suppress(Exception):
            controller = self.admin().describe_cluster(request_timeout=5).result(timeout=10).controller
            return None if controller is None else int(controller.id)
        return None

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Any = None, timeout_s: float = 30.0) -> None:
        """Create the run's topic; refuses one that exists (its old records would join this run's audit)."""
        # The listing of all topics: asking for this one by name could auto-create it.
        if topic not in self.metadata().topics:
            return super().create_topic(topic, partitions, replication_factor, config, timeout_s)
        raise ClusterError(f"topic {topic!r} already exists on the cluster at {self.direct_bootstrap()}: its records "
                           f"would be counted in this run's audit. Delete it, or set another topic.name in the scenario")

    # --- views -------------------------------------------------------------------
    def direct_bootstrap(self, avoid: Collection[int] = ()) -> str:
        """The bootstrap servers the user gave: never through a proxy (kafkaproof isolates no node here)."""
        return self.state().bootstrap

    def direct_client_config(self) -> dict[str, Any]:
        """The user's connection config: kafkaproof's own clients reach the brokers as every client does."""
        return self.client_config()

    def bootstrap_servers(self) -> str:
        """What clients use: the proxies, or the given bootstrap servers without them."""
        return super().bootstrap_servers() if self.has_proxy else self.direct_bootstrap()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Metadata is readable; with proxies, every proxy answers and metadata read through
        them names only proxy addresses."""
        if self.has_proxy:
            self.check_proxies(timeout_s)
        else:
            self.metadata(timeout_s=timeout_s)

    def node_status(self, node: NodeState) -> dict[str, Any]:
        """A broker kafkaproof does not own: its address, always counted as running."""
        return {"id": node.id, "roles": node.roles, "address": node.address,
                "namespace": None, "pid": None, "state": "external", "alive": True, "paused": False}

    def status_fields(self, st: ClusterState) -> dict[str, Any]:
        return {"backend": "external", "kafka_version": None, "network": "external"}
