"""The one cluster-backend interface: what the runner, the fault injector, the sampler and the pipeline use.

They never know which backend they have. A backend says which fault kinds it supports
(`supported_faults`); the run refuses the others before anything starts. What it can do beyond
the common interface are capabilities, present or None (`nodes`, `proxies`, `disks`, `clock`:
`capabilities.py`), never methods that raise. Backends:
`local` (`LocalCluster`: Kafka JVMs in network namespaces on this host), `compose`
(`ComposeCluster`: containers of a Docker Compose project, as the seeds run Kafka),
`external` (`ExternalCluster`: an existing cluster, fronted by fault proxies), `attached`
(`AttachedCluster`: a team's own running compose project, process faults on its containers) — all
state-file backed, so `attach(name)` finds any after a crash and `down_all()` tears
everything down. `start_cluster(config)` starts a local or compose cluster by
`config.backend`.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Collection, Mapping, Protocol, runtime_checkable

from ..spec.cluster import ClusterConfig, NodeLink
from ..spec.faults import FAULT_KINDS
from . import docker_engine, host, procs, state
from .capabilities import FaultProxies, FaultyDisks, NodeClocks, NodeProcesses
from .attached import AttachedCluster
from .compose import ComposeCluster
from .external import ExternalCluster
from .install import ensure_kafka
from .local import LocalCluster


@runtime_checkable
class ClusterBackend(Protocol):
    """A running cluster, whatever runs it."""

    name: str
    backend: str

    @property
    def supported_faults(self) -> frozenset[str]:
        """The fault kinds this backend can inject (process, network, proxy)."""

    def unsupported_reason(self, kind: str) -> str:
        """Why it cannot inject a fault of `kind`, and what would."""
    def roll_refused(self, version: str | None, settings: Mapping[str, Any]) -> str | None:
        """Why it cannot roll nodes onto another version or settings (None: it can); a plain restart always can."""

    # membership and addresses
    def node_ids(self) -> list[int]: ...
    def broker_ids(self) -> list[int]: ...
    def controller_ids(self) -> list[int]: ...
    def bootstrap_servers(self) -> str:
        """What clients use (the fault proxies' addresses when the cluster has them)."""
    def direct_bootstrap(self, avoid: Collection[int] = ()) -> str:
        """Never through a fault proxy: kafkaproof's admin client, snapshots, the audit drain."""
    def node_link(self, node_id: int) -> NodeLink | None:
        """Where network faults act: the node's network namespace and addresses (None: not here)."""
    def node_dir(self, node_id: int) -> Path: ...
    def node_log(self, node_id: int) -> Path:
        """The node's log as a file (a container's output saved first)."""

    # node processes
    def node_state(self, node_id: int) -> str:
        """running | paused | dead."""
    def node_version(self, node_id: int) -> str:
        """The Kafka version the node runs."""
    def node_versions(self) -> dict[int, str]: ...
    def node_settings(self, node_id: int) -> dict[str, Any]:
        """Settings rolling faults gave the node on top of the cluster's."""
    def wait_node_caught_up(self, node_id: int, timeout_s: float = 120.0) -> float:
        """Until a restarted node serves again (in every ISR it replicates); returns the seconds it took."""
    def node_incarnation(self, node_id: int) -> str | None:
        """An id that changes each time the node starts (a restart is visible); None when not known."""
    def wait_node_listening(self, node_id: int, timeout_s: float = 60.0) -> None: ...
    def disk_state(self, node_id: int) -> str:
        """running | dead of the node's faulty disk (diskfs), 'none' without one."""

    # capabilities (`capabilities.py`): the backend itself when it has one, None when it lacks it. Their
    # methods (start_node, stop_node, pause_node, resume_node, start_node_as; proxy_control, ...;
    # disk_control, power_loss; set_clock_offsets) exist only on a backend that has the capability.
    @property
    def nodes(self) -> NodeProcesses | None:
        """Node processes kafkaproof owns (local, compose; not an existing cluster's)."""
    @property
    def proxies(self) -> FaultProxies | None:
        """Fault proxies before the brokers (a cluster started with them)."""
    @property
    def disks(self) -> FaultyDisks | None:
        """Faulty disks under the log directories (a local cluster started with them)."""
    @property
    def clock(self) -> NodeClocks | None:
        """Movable node wall clocks (a local cluster started with them)."""

    # fault proxies (the `proxies` capability's, and whether there is one)
    @property
    def has_proxy(self) -> bool: ...
    def proxy_ids(self) -> list[int]: ...
    def proxy_state(self, node_id: int) -> str: ...
    def proxy_control(self, node_id: int) -> Any: ...
    def proxy_events_path(self, node_id: int) -> Path: ...

    # what Kafka says
    def active_controller(self) -> int | None: ...
    def partitions(self, topic: str) -> dict[int, dict]: ...
    def leader_of(self, topic: str, partition: int) -> int: ...
    def followers(self, topic: str, partition: int) -> list[int]: ...
    def random_follower(self, topic: str, partition: int, rng: random.Random | None = None) -> int: ...
    def wait_ready(self, timeout_s: float = 120.0) -> None: ...
    def status(self) -> dict: ...

    # topics
    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 30.0) -> None: ...
    def describe_topic(self, topic: str) -> dict: ...
    def wait_in_sync(self, topic: str, timeout_s: float = 60.0) -> None: ...

    # faults bookkeeping (in the state file, so another process can heal them)
    def active_faults(self) -> list[dict[str, Any]]: ...
    def record_fault(self, fault: dict[str, Any]) -> None: ...
    def forget_fault(self, fault_id: str) -> None: ...

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Heal every fault, stop everything the backend started, remove its state. Safe to repeat."""


def unsupported_faults(kinds: set[str] | frozenset[str], supported: frozenset[str]) -> list[str]:
    """Pure: the fault kinds of a timeline a backend cannot inject, sorted."""
    return sorted(set(kinds) - set(supported))


def attach(name: str = "default") -> ClusterBackend:
    """The running cluster `name`, as the backend that started it (from its state file)."""
    return backend_class(state.load_state(name).backend)(name)


BACKENDS: dict[str, type] = {"local": LocalCluster, "compose": ComposeCluster, "external": ExternalCluster,
                             "attached": AttachedCluster}


def backend_class(backend: str) -> type:
    """The class of a backend by its name (local, compose, external, attached)."""
    return BACKENDS[backend]


def start_cluster(config: ClusterConfig, upgrade_versions: Collection[str] = ()) -> ClusterBackend:
    """Start the cluster `config` describes on its backend (`local` or `compose`), with the Kafka versions
    its rolling upgrades go to installed first (jars, and images for compose), so a roll never waits on Maven."""
    for version in upgrade_versions:
        ensure_kafka(version)  # the jars also run kafka-features when the upgrade is finalised
        if config.backend == "compose":
            docker_engine.ensure_engine()
            docker_engine.ensure_image(version)
    return backend_class(config.backend).up(config)


def down_all() -> list[str]:
    """Tear down every cluster with a state file, any stray kafkaproof namespaces, and every process a
    crashed run or analysis left (its workers, its Spark driver): all of this state directory's. The
    clusters and namespaces of another state directory on this host (its slots' claims, `slots`) stay
    (`host.clear_strays`). Returns the clusters torn down."""
    procs.stop_all()
    names = state.list_clusters()
    for name in names:
        attach(name).down()
    host.clear_strays()
    return names


ALL_FAULTS = frozenset(FAULT_KINDS)
