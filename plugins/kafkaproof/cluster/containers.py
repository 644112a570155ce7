"""Nodes that are containers: their state, start, stop, kill, pause and logs through the Docker engine.

Shared by the compose backend (kafkaproof's own project, `compose.py`) and an attached compose project
(a team's own, `attached.py`): a process fault is `docker kill`/`stop`/`pause`/`start` of the node's
container (`NodeState.container`), whoever created it. What differs is a hook: `_after_start` (the
compose backend names the restarted container's network namespace again) and where the metadata log
lives inside the container (`_metadata_dir`, read for the KRaft quorum-state file).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from ..errors import ClusterError
from . import docker_engine as de
from .state import NodeState

log = logging.getLogger(__name__)


class ContainerNodes:
    """Mixin: `node(id).container` is a container of the engine this process is bound to (`bind_engine`)."""

    # from the class it is mixed into (`base.StatefulCluster`): node(id) -> NodeState, node_dir(id) -> Path
    node: Any
    node_dir: Any

    def _after_start(self, node_id: int) -> None:
        """What a backend does after a node's container started again (nothing by default)."""

    def _metadata_dir(self, node: NodeState) -> str:  # pragma: no cover - per backend
        """The container's directory holding `__cluster_metadata-0`."""
        raise NotImplementedError

    def _inspect_state(self, node_id: int) -> dict[str, Any]:
        proc = de.docker("inspect", "--type", "container", "--format", "{{json .State}}",
                         self.node(node_id).container, check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else {}

    def node_state(self, node_id: int) -> str:
        """running | paused | dead (also: the container is gone)."""
        st = self._inspect_state(node_id)
        if st.get("Paused"):
            return "paused"
        return "running" if st.get("Running") else "dead"

    def node_incarnation(self, node_id: int) -> str | None:
        """The container's start time and pid: they change each time the node starts."""
        st = self._inspect_state(node_id)
        return f"{st.get('Pid')}:{st.get('StartedAt')}" if st.get("Running") else None

    def start_node(self, node_id: int) -> None:
        """Start a stopped node's container again (same container, same data); no-op unless it is dead."""
        if self.node_state(node_id) != "dead":
            return
        de.docker("start", self.node(node_id).container)
        self._after_start(node_id)
        log.info("node %d started (container %s)", node_id, self.node(node_id).container)

    def stop_node(self, node_id: int, graceful: bool = True, timeout_s: float = 30.0) -> None:
        """`docker stop` (SIGTERM: a controlled shutdown, SIGKILL after `timeout_s`) or `docker kill`."""
        container = self.node(node_id).container
        if self.node_state(node_id) == "dead":
            return
        if self.node_state(node_id) == "paused":
            de.docker("unpause", container)
        try:
            if graceful:
                de.docker("stop", "--time", str(int(timeout_s)), container, timeout=timeout_s + 30)
            else:
                de.docker("kill", container)
        except ClusterError:
            if self.node_state(node_id) != "dead":
                raise
            log.info("node %d exited by itself while it was being stopped", node_id)  # e.g. a fatal fault
        deadline = time.monotonic() + 10
        while self.node_state(node_id) != "dead" and time.monotonic() < deadline:
            time.sleep(0.1)

    def pause_node(self, node_id: int) -> None:
        """`docker pause`: every process of the container frozen, its connections left open."""
        de.docker("pause", self.node(node_id).container)

    def resume_node(self, node_id: int) -> None:
        if self.node_state(node_id) == "paused":
            de.docker("unpause", self.node(node_id).container)

    def node_log(self, node_id: int) -> Path:
        """The container's output so far, saved as the node's `server.log`."""
        self._save_log(self.node(node_id))
        return self.node_dir(node_id) / "server.log"

    def _save_log(self, node: NodeState, path: Path | None = None) -> None:
        proc = de.docker("logs", node.container, check=False, timeout=60)
        if proc.returncode == 0:
            path = path or self.node_dir(node.id) / "server.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(proc.stdout + proc.stderr)

    def node_log_since_start(self, node_id: int) -> str:
        """The container's output since its latest start (`docker logs --since StartedAt`): earlier starts'
        lines (a fatal line of last week, a started line of the start before) do not count."""
        started = self._inspect_state(node_id).get("StartedAt")
        proc = de.docker("logs", *(["--since", started] if started else []), self.node(node_id).container,
                         check=False, timeout=60)
        return proc.stdout + proc.stderr if proc.returncode == 0 else ""

    def log_hint(self, node_id: int) -> str:
        return f"`docker logs {self.node(node_id).container}`"

    def read_quorum_state(self, node_id: int) -> dict | None:
        """A controller's KRaft `quorum-state` file, read inside its container (None when it cannot be)."""
        node = self.node(node_id)
        proc = de.docker("exec", node.container, "cat", f"{self._metadata_dir(node)}/__cluster_metadata-0/quorum-state",
                         check=False, timeout=20)
        try:
            return json.loads(proc.stdout) if proc.returncode == 0 else None
        except json.JSONDecodeError:
            return None
