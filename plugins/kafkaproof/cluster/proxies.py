"""The fault proxies of a cluster backend: one Kafka-aware proxy process per broker, on the client path.

Each proxy runs in the root namespace in its own session (it outlives the process that
started it, like the brokers); pid, start time, listen address and control socket are in the
state file (`nodes[].proxy`), so a teardown stops it after a crash. The control socket is its
owner's only (`controlsock`: a 0700 directory, the peer's uid checked). See docs/proxy.md.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .. import controlsock, logs
from ..errors import ClusterError, FaultError
from . import process, state
from .state import ClusterState, NodeState, ProxyEntry

log = logging.getLogger(__name__)

PROXY_START_TIMEOUT_S = 20.0


def front_with_proxies(nodes: list[dict], proxy_host: str, ports: list[int]) -> None:
    """Pure on `nodes` (state-file nodes, changed in place): a rewriting fault proxy before every broker's
    client address (`host:client_port`), at `ports` in node order, advertised instead of the broker and
    knowing where its peers listen (so metadata read through one names only proxies)."""
    brokers = [n for n in nodes if "broker" in n["roles"]]
    listens = {n["id"]: f"{proxy_host}:{port}" for n, port in zip(brokers, ports)}
    for n, port in zip(brokers, ports):
        n.update(advertised_host=proxy_host, advertised_port=port)
        n["proxy"] = {"listen": listens[n["id"]], "upstream": f"{n['host']}:{n['client_port']}", "rewrite": True,
                      "peers": {str(o): listens[o] for o in sorted(listens) if o != n["id"]},
                      "process": None, "control": None}


class ProxyFleet:
    """Mixin of a cluster backend: its fault proxies (`capabilities.FaultProxies`)."""

    # what the class it is mixed into provides (`capabilities.ClusterCore`, and `views.KafkaViews`)
    name: str
    _proxy_popen: dict[int, subprocess.Popen]
    state: Callable[[], ClusterState]
    node: Callable[[int], NodeState]
    node_dir: Callable[[int], Path]
    node_state: Callable[[int], str]
    _reap: Callable[[], None]
    bootstrap_servers: Callable[[], str]
    client_config: Callable[[], dict[str, Any]]

    @property
    def has_proxy(self) -> bool:
        return bool(self.state().proxy)

    def proxy_ids(self) -> list[int]:
        """Node ids of the brokers that have a fault proxy."""
        return [n.id for n in self.state().nodes if n.proxy]

    def proxy_state(self, node_id: int) -> str:
        """running / paused / dead of a broker's proxy process ('none' without a proxy)."""
        proxy = self.node(node_id).proxy
        if not proxy:
            return "none"
        self._reap()
        return process.state_of(proxy.process)

    def proxy_events_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "proxy-events.jsonl"

    def start_proxy(self, node_id: int) -> None:
        """Start (or restart) the fault proxy in front of one broker; no-op if it is running.

        The proxy runs in the root namespace in its own session (it outlives the
        process that started it, like the JVMs); `down()` stops it. Its control socket
        and pid are recorded in the state file once it printed its ready line.
        """
        proxy = self.node(node_id).proxy
        if not proxy:
            raise ClusterError(f"node {node_id} has no fault proxy (start the cluster with --proxy)")
        if process.state_of(proxy.process) != "dead":
            return
        ndir = self.node_dir(node_id)
        ndir.mkdir(parents=True, exist_ok=True)
        ready_file = ndir / "proxy.ready.json"
        ready_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "kafkaproof.proxy", "--listen", f"{node_id}@{proxy.listen}={proxy.upstream}",
               "--control", f"unix:{controlsock.socket_path(f'{self.name}-proxy-{node_id}')}", "--events", str(self.proxy_events_path(node_id)), "--log-level", "INFO"]
        # Local brokers advertise their proxy themselves; in front of an existing cluster
        # the proxy rewrites metadata to point at itself and its peers (external.py).
        if not proxy.rewrite:
            cmd.append("--no-rewrite")
        for peer_id, address in sorted(proxy.peers.items()):
            cmd += ["--peer", f"{peer_id}={address}"]
        env = process.module_env()
        with open(ready_file, "wb") as out, open(ndir / "proxy.log", "ab") as err:
            popen = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=ndir, env=env,
                                     start_new_session=True)
        self._proxy_popen[node_id] = popen
        ref = process.ref_for(popen.pid)
        with state.update_node(self.name, node_id) as n:  # recorded before we wait: a crash now still kills it
            n.proxy.process, n.proxy.control = ref, None
        deadline = time.monotonic() + PROXY_START_TIMEOUT_S
        ready = None
        while time.monotonic() < deadline:
            text = ready_file.read_text() if ready_file.exists() else ""
            if "\n" in text:
                ready = json.loads(text.split("\n", 1)[0])
                break
            if popen.poll() is not None:
                break
            time.sleep(0.05)
        if not ready or not ready.get("ready"):
            process.terminate(ref, grace_s=2.0, reap=self._reap)
            tail = (ndir / "proxy.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise ClusterError(f"the fault proxy of node {node_id} did not start ({proxy.listen} -> "
                               f"{proxy.upstream}): {' | '.join(tail)}")
        with state.update_node(self.name, node_id) as n:
            n.proxy.control = ready["control"]
        log.info("proxy of node %d started (pid %d): %s -> %s, control %s", node_id, popen.pid,
                 proxy.listen, proxy.upstream, ready["control"])

    def stop_proxy(self, node_id: int) -> None:
        proxy = self.node(node_id).proxy
        if proxy:
            process.terminate(proxy.process, grace_s=5.0, reap=self._reap)
            _remove_socket(proxy)

    def proxy_control(self, node_id: int):
        """A connected control client of a broker's proxy (close it after use)."""
        from ..proxy import ControlClient
        proxy = self.node(node_id).proxy
        if not proxy:
            raise FaultError(f"node {node_id} has no fault proxy; proxies front the brokers "
                             f"{self.proxy_ids() or '(none: start the cluster with --proxy)'}")
        if not proxy.control or self.proxy_state(node_id) == "dead":
            raise FaultError(f"the fault proxy of node {node_id} is not running")
        return ControlClient(proxy.control, timeout=10.0)

    def check_proxies(self, timeout_s: float) -> None:
        """Every proxy answers on its control socket and metadata is readable through the proxies."""
        from confluent_kafka.admin import AdminClient
        for nid in self.proxy_ids():
            if self.node_state(nid) != "running":
                continue
            client = self.proxy_control(nid)
            try:
                client.call("ping")
            finally:
                client.close()
        admin = AdminClient({**self.client_config(), "bootstrap.servers": self.bootstrap_servers(),
                             "logger": logs.librdkafka_logger(),
                             "log_level": 2})
        try:
            md = admin.list_topics(timeout=timeout_s)
        except Exception as e:
            raise ClusterError(f"metadata not readable through the fault proxies {self.bootstrap_servers()}: {e}") from e
        advertised = {f"{b.host}:{b.port}" for b in md.brokers.values()}
        expected = {n.proxy.listen for n in self.state().nodes if n.proxy}
        if not advertised <= expected:
            raise ClusterError(f"brokers advertise {sorted(advertised)}, not their proxies {sorted(expected)}")

    def stop_proxies(self, grace_s: float = 5.0) -> None:
        """Stop every proxy process of the cluster (teardown)."""
        for node in self.state().nodes:
            if node.proxy:
                process.terminate(node.proxy.process, grace_s=grace_s, reap=self._reap)
                _remove_socket(node.proxy)


def _remove_socket(proxy: ProxyEntry) -> None:
    """The control socket a killed proxy left (a stopped one removes its own)."""
    path = controlsock.unix_path(proxy.control or "")
    if path:
        Path(path).unlink(missing_ok=True)
