"""What a cluster backend can do beyond the common interface, as capabilities that are present or absent.

Every backend has nodes, addresses, Kafka's views and a state file (`backend.ClusterBackend`). The rest
depends on what kafkaproof owns of the cluster, and a backend says so by a property that holds the
capability (the backend itself) or None, never by a method that raises:

| property  | capability       | local                 | compose | external | attached |
|-----------|------------------|-----------------------|---------|----------|----------|
| `nodes`   | `NodeProcesses`  | yes                   | yes     | None     | yes      |
| `proxies` | `FaultProxies`   | with `--proxy`        | same    | same     | same     |
| `disks`   | `FaultyDisks`    | with `--disk`         | None    | None     | None     |
| `clock`   | `NodeClocks`     | with `--clock`        | None    | None     | None     |

Network faults need no property: a backend with nodes gives `node_link(id)` (local: the node's namespace;
compose and attached: the container's, entered through the engine). `supported_faults` follows from them;
a caller that needs one asks `if cluster.clock is None` and says why (`unsupported_reason`). `ClusterCore`
is what the backends' mixins (`views.KafkaViews`, `proxies.ProxyFleet`, `disks.DiskFleet`) rely on from
the class they are mixed into; each declares its share as annotations, and tests/unit/cluster/test_capabilities.py checks every backend provides them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from .state import ClusterState, NodeState


@runtime_checkable
class NodeProcesses(Protocol):
    """Nodes whose processes (or containers) kafkaproof owns: stopped, started, paused, rolled."""

    def start_node(self, node_id: int) -> None: ...
    def stop_node(self, node_id: int, graceful: bool = True, timeout_s: float = 30.0) -> None: ...
    def pause_node(self, node_id: int) -> None: ...
    def resume_node(self, node_id: int) -> None: ...
    def start_node_as(self, node_id: int, version: str, settings: Mapping[str, Any]) -> None:
        """Start a stopped node on another Kafka version and/or settings, on the same data."""


@runtime_checkable
class FaultProxies(Protocol):
    """Kafka-aware fault proxies in front of the brokers' client listeners."""

    def proxy_ids(self) -> list[int]: ...
    def proxy_state(self, node_id: int) -> str: ...
    def proxy_control(self, node_id: int) -> Any: ...
    def proxy_events_path(self, node_id: int) -> Path: ...


@runtime_checkable
class FaultyDisks(Protocol):
    """The nodes' log directories on diskfs: rules, and a power loss that drops what was not fsynced."""

    def disk_state(self, node_id: int) -> str: ...
    def disk_control(self, node_id: int) -> Any:
        """A connected control client of the node's diskfs (close it after use)."""
    def power_loss(self, node_ids: list[int]) -> dict[int, dict]:
        """Cut the nodes' power at once (every write since a file's last fsync dropped); what each disk dropped."""


@runtime_checkable
class NodeClocks(Protocol):
    """Nodes started under libfaketime, whose wall clocks can move."""

    def set_clock_offsets(self, offsets: Mapping[int, float]) -> dict[int, dict]:
        """Move each node's wall clock by its offset from true time (0: back); returns the evidence per node."""


class ClusterCore(Protocol):
    """What the mixins of a backend rely on from the class they are mixed into (`base.StatefulCluster` and
    the concrete backend)."""

    name: str

    def state(self) -> ClusterState: ...
    def node(self, node_id: int) -> NodeState: ...
    def node_dir(self, node_id: int) -> Path: ...
    def node_state(self, node_id: int) -> str: ...
    def _reap(self) -> None: ...
