"""The local cluster backend: real Apache Kafka (KRaft) nodes as JVM processes on this host.

Each node runs `kafka.Kafka` in its own network namespace with its own IP (see
`network.py`) when we are root, else on loopback ports (network faults are then
refused). Everything started is recorded in a state file (`state.py`) so that
`attach(name).down()` heals and removes the leftovers of a crashed run.

Listeners: CLIENT (9092) for clients, INTERNAL (9094) between brokers,
CONTROLLER (9093) for the KRaft quorum, so client-path faults can spare the
replication path.

With `proxy=True` each broker gets a Kafka-aware fault proxy (`proxies.py`) and
advertises the proxy's address on its CLIENT listener, so every client connection
crosses the proxy while the INTERNAL and CONTROLLER traffic stays direct.
kafkaproof's own admin client (readiness, leaders for fault targets, snapshots) and
the audit drain use the INTERNAL listener (`direct_bootstrap()`), so a proxy fault
never blinds the orchestrator.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ClusterError, ClusterNotRunning, FaultError
from ..paths import write_text_atomic
from ..spec.cluster import (JIT_MODES, ClusterConfig, new_cluster_id, node_properties, plan_nodes, render_properties,
                            scram_format_args, shutdown_waves)
from ..spec import cluster_features
from ..spec.fault_families import kinds_needing
from ..spec.faults import CLOCK_KINDS, FAULT_KINDS, NETWORK_KINDS
from . import clock, host, network, process, state
from .base import START_MARKER, StatefulCluster
from .disks import DiskFleet, unmount_leftovers
from .install import KafkaDistribution, ensure_kafka
from .disk import BACKING_DIR
from .process import ProcessRef
from .security import provision_security, write_client_properties
from .state import ClusterState, NodeState

log = logging.getLogger(__name__)


class LocalCluster(StatefulCluster, DiskFleet):
    """A running local cluster. Use `LocalCluster.up(config)` as a context manager, or `backend.attach(name)`."""

    backend = "local"

    def __init__(self, name: str):
        super().__init__(name)
        st = state.load_state(name)
        self.dist = KafkaDistribution(st.kafka_version, Path(st.kafka_libs), st.kafka_source)

    @property
    def supported_faults(self) -> frozenset[str]:
        """Every kind; network faults only when the nodes run in network namespaces (root), clock faults
        only when they run under libfaketime, disk faults only on diskfs (started with them on)."""
        st = self.state()
        kinds = self.supported_for("netns" if st.network == "netns" else "loopback")
        if not st.clock:
            kinds -= frozenset(CLOCK_KINDS)
        return kinds if st.disk else kinds - frozenset(kinds_needing("disk"))

    @staticmethod
    def supported_for(network_mode: str = "auto") -> frozenset[str]:
        """The fault kinds a cluster started here with `network_mode` (and clock and disk faults on) will support."""
        netns = network_mode == "netns" or (network_mode == "auto" and network.namespaces_supported())
        return frozenset(k for k in FAULT_KINDS if netns or k not in NETWORK_KINDS)

    def unsupported_reason(self, kind: str) -> str:
        if kind in CLOCK_KINDS:
            return (f"clock fault {kind!r} needs nodes started under libfaketime: start the cluster with "
                    f"`kafkaproof cluster up --clock` (scenarios: implied by a clock fault)")
        if kind in kinds_needing("disk"):
            return (f"disk fault {kind!r} needs the nodes' log directories on diskfs: start the cluster with "
                    f"`kafkaproof cluster up --disk` (scenarios: implied by a disk fault)")
        return (f"network fault {kind!r} needs nodes in network namespaces (run as root); "
                f"this cluster runs on loopback")

    def log_dir(self, node_id: int) -> Path:
        """The node's log directory (`log.dirs`; with disk faults on, its diskfs mount), where `file_corrupt`
        acts."""
        return self.node_dir(node_id) / "data"

    # --- lifecycle ------------------------------------------------------------
    @classmethod
    def up(cls, config: ClusterConfig) -> "LocalCluster":
        """Start a cluster and return once every broker is registered and the quorum has a leader."""
        config.validate()
        if state.state_path(config.name).exists():
            raise ClusterError(f"a cluster named {config.name!r} is already up; `kafkaproof cluster down"
                               f"{'' if config.name == 'default' else ' --name ' + config.name}` first")
        use_netns = _choose_network(config.network)
        dist = ensure_kafka(config.kafka_version)
        workdir = state.cluster_dir(config.name)
        with state.locked(config.name), host.claimed_slot(config.name, use_netns) as slot:
            nodes = [NodeState.from_json(n) for n in plan_nodes(config, slot, use_netns)]
            st = ClusterState(name=config.name, backend="local", slot=slot, cluster_id=new_cluster_id(),
                              network="netns" if use_netns else "loopback", kafka_version=dist.version,
                              kafka_libs=str(dist.libs), kafka_source=dist.source, heap=config.heap, jit=config.jit,
                              proxy=config.proxy, clock=config.clock, disk=config.disk, config=config.node_layout(),
                              nodes=nodes, faults=[], created_wall=time.time())
            state.save_state(config.name, st)
        cluster = cls(config.name)
        try:
            cluster._provision(config, workdir)
            cluster.wait_ready(config.start_timeout_s)
        except BaseException:
            log.error("cluster %s failed to start; tearing down (node logs in %s)", config.name, workdir)
            cluster._dump_log_tails()
            cluster.down(keep_logs=True)
            raise
        return cluster

    def _provision(self, config: ClusterConfig, workdir: Path) -> None:
        st = state.load_state(self.name)
        if st.network == "netns":
            for node in st.nodes:
                network.create_link(node.link)
        if config.client_security != "PLAINTEXT":
            with state.update_state(self.name) as st:
                st.security, st.client_config = provision_security(config, [n.to_json() for n in st.nodes], workdir)
            path = write_client_properties(workdir, st.client_config, self.bootstrap_servers())
            log.info("cluster %s: CLIENT listeners use %s; the client config is %s", self.name,
                     config.client_security, path)
        planned = [n.to_json() for n in st.nodes]  # the form spec.cluster's node_properties reads
        for node in planned:
            ndir = workdir / f"node-{node['id']}"
            if ndir.exists():
                shutil.rmtree(ndir)
            (ndir / "data").mkdir(parents=True)
            props = node_properties(config, node, planned, ndir, self.dist.major, st.security)
            write_text_atomic(ndir / "server.properties", render_properties(props), private=True)
        extra = scram_format_args(st.security) + cluster_features.format_args(config.features, config.kafka_version)
        if config.features:
            log.info("cluster %s: formatted with feature levels %s", self.name,
                     ", ".join(f"{k}={v}" for k, v in sorted(config.features.items())))
        with ThreadPoolExecutor(max_workers=len(st.nodes)) as pool:  # each format is a JVM start
            list(pool.map(lambda n: self._format(workdir / f"node-{n.id}", st.cluster_id, extra), st.nodes))
        if config.disk:  # the formatted directory becomes the disk's backing: what format wrote is on disk
            for node in st.nodes:
                ndir = workdir / f"node-{node.id}"
                os.rename(ndir / "data", ndir / BACKING_DIR)
                self.start_disk(node.id)
        for node in st.nodes:  # proxies first: brokers advertise them from their first registration
            if node.proxy:
                self.start_proxy(node.id)
        for node in st.nodes:
            self.start_node(node.id)

    def _format(self, ndir: Path, cluster_id: str, extra: Sequence[str] = ()) -> None:
        main = "kafka.tools.StorageTool"
        cmd = self.dist.java_command(main, "format", "-t", cluster_id, "-c", str(ndir / "server.properties"),
                                     "--ignore-formatted", *extra, heap="128m", jvm_opts=JIT_MODES["quick"])
        # The SCRAM users' passwords (`extra`) must not show in the process list (/proc/<pid>/cmdline, readable
        # by every user): the tool's class and arguments go in an owner-only argument file the JVM reads.
        split = cmd.index(main)
        argfile = ndir / "format.args"
        write_text_atomic(argfile, java_argfile(cmd[split:]), private=True)
        try:
            # The pool threads outlive the format; a crash of this process kills it at once.
            proc = subprocess.run(process.die_with_parent([*cmd[:split], f"@{argfile}"]), capture_output=True,
                                  text=True)
        finally:
            argfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise ClusterError(f"formatting {ndir} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Heal every fault, stop every node, remove namespaces and the state file. Safe to repeat.

        `graceful=False` kills the JVMs at once: for a cluster whose data was already collected.
        """
        st = self._begin_down()
        if st is None:
            return
        by_id = {n.id: n for n in st.nodes}
        for wave, grace_s in shutdown_waves([n.to_json() for n in st.nodes]):
            self._stop_processes([by_id[n["id"]].process for n in wave], graceful, grace_s)
        self.stop_proxies()
        self.stop_disks()
        host.sweep(state.cluster_dir(self.name))
        unmount_leftovers(state.cluster_dir(self.name))
        if st.network == "netns":
            for node in st.nodes:
                if node.link:
                    network.destroy_link(node.link)
        if self._admin is not None:
            self._admin = None
        host.forget_cluster(self.name)
        if keep_logs:  # keep server.log and properties, drop the (large) log segments
            for node in st.nodes:
                shutil.rmtree(self.node_dir(node.id) / "data", ignore_errors=True)  # log-<i> (JBOD) inside it
                shutil.rmtree(self.node_dir(node.id) / BACKING_DIR, ignore_errors=True)
        else:
            shutil.rmtree(state.cluster_dir(self.name), ignore_errors=True)
        log.info("cluster %s is down", self.name)

    def _stop_processes(self, refs: list[ProcessRef | None], graceful: bool, grace_s: float) -> None:
        """Signal every process first, so they shut down in parallel, then wait for them all within one
        `grace_s` (SIGKILL for those still alive at its end)."""
        for ref in refs:
            if ref and process.state_of(ref) != "dead":
                with contextlib.suppress(FaultError, ProcessLookupError):
                    process.send_signal(ref, signal.SIGCONT)
                    process.send_signal(ref, signal.SIGTERM if graceful else signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        for ref in refs:
            process.terminate(ref, grace_s=max(0.0, deadline - time.monotonic()), reap=self._reap)

    # --- nodes ----------------------------------------------------------------
    def node_ref(self, node_id: int) -> ProcessRef | None:
        return self.node(node_id).process

    def node_state(self, node_id: int) -> str:
        self._reap()
        return process.state_of(self.node_ref(node_id))

    def node_incarnation(self, node_id: int) -> str | None:
        """The node's process (pid and start time): it changes each time the node starts."""
        ref = self.node_ref(node_id)
        return f"{ref.pid}:{ref.start_ticks}" if ref else None

    def start_node(self, node_id: int) -> None:
        """Start (or restart) one node's JVM; no-op if it is running."""
        node = self.node(node_id)
        if process.state_of(node.process) != "dead":
            return
        ndir = self.node_dir(node_id)
        st = self.state()
        if st.disk:  # a power loss left it unmounted, or its process died
            self.start_disk(node_id)
        jvm_opts = JIT_MODES[st.jit]
        if st.security:
            jvm_opts += (f"-Djdk.net.hosts.file={st.security['hosts_file']}",)
        cmd = network.netns_prefix(node.namespace) + self._node_dist(node).java_command(
            "kafka.Kafka", str(ndir / "server.properties"), heap=st.heap, jvm_opts=jvm_opts)
        logf = open(ndir / "server.log", "ab")
        logf.write(f"\n{START_MARKER} {node_id} at {time.strftime('%Y-%m-%dT%H:%M:%S')} ====\n".encode())
        logf.flush()
        env = {**os.environ, **clock.faketime_env(ndir)} if st.clock else None
        popen = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=ndir, start_new_session=True, env=env)
        logf.close()
        self._popen[node_id] = popen
        # `ip netns exec` execs java in place, so this pid is the JVM's.
        ref = process.ref_for(popen.pid)
        with state.update_node(self.name, node_id) as n:
            n.process, n.status = ref, "running"
        log.info("node %d started (pid %d)", node_id, popen.pid)

    def _node_dist(self, node: NodeState) -> KafkaDistribution:
        """The Kafka a node runs: the cluster's, or the one a rolling upgrade started it on."""
        if not node.kafka_libs:
            return self.dist
        return KafkaDistribution(node.kafka_version, Path(node.kafka_libs), node.kafka_source)

    def start_node_as(self, node_id: int, version: str, settings: dict) -> None:
        """Start a stopped node on `version`'s jars, its server.properties written again for that version
        with `settings` on top (the same data directory)."""
        dist = ensure_kafka(version)
        st, node = self.state(), self.node(node_id)
        config = ClusterConfig.from_layout(self.name, st.config, version)
        props = node_properties(config, node.to_json(), [n.to_json() for n in st.nodes], self.node_dir(node_id),
                                dist.major, st.security)
        props.update(settings)
        write_text_atomic(self.node_dir(node_id) / "server.properties", render_properties(props), private=True)
        self._record_node_change(node_id, version, settings, kafka_libs=str(dist.libs), kafka_source=dist.source)
        self.start_node(node_id)

    def stop_node(self, node_id: int, graceful: bool = True, timeout_s: float = 30.0) -> None:
        """Stop a node: SIGTERM (controlled shutdown) or SIGKILL, and wait until it is gone."""
        ref = self.node_ref(node_id)
        if process.state_of(ref) == "dead":
            return
        if graceful:
            process.send_signal(ref, signal.SIGCONT)
            process.send_signal(ref, signal.SIGTERM)
            if not process.wait_dead(ref, timeout_s, self._reap):
                log.warning("node %d ignored SIGTERM for %.0fs; killing it", node_id, timeout_s)
                process.send_signal(ref, signal.SIGKILL)
        else:
            process.send_signal(ref, signal.SIGKILL)
        process.wait_dead(ref, 10.0, self._reap)

    def set_clock_offsets(self, offsets: Mapping[int, float]) -> dict[int, dict]:
        """Move each node's wall clock to true time + its offset (0: back to true time), wait until the nodes
        have re-read their files, and return the evidence per node (`clock_evidence`)."""
        if not self.state().clock:
            raise FaultError(self.unsupported_reason("clock_skew"))
        for node_id, offset_s in offsets.items():
            clock.set_offset(self.node_dir(node_id), offset_s)
        time.sleep(clock.SETTLE_S)
        return {node_id: self.clock_evidence(node_id) for node_id in offsets}

    def clock_evidence(self, node_id: int) -> dict:
        """The node's clock offset as its file holds it, and whether its running process reads that file."""
        ref = self.node_ref(node_id)
        return {"offset_s": clock.read_offset(self.node_dir(node_id)),
                "faketime_loaded": bool(ref and process.state_of(ref) != "dead" and clock.process_has_faketime(ref.pid))}

    def pause_node(self, node_id: int, timeout_s: float = 5.0) -> None:
        """SIGSTOP the node's JVM (a hung process: its connections stay open), and wait until it is stopped.

        A JVM's hundreds of threads take a moment to stop on a busy host: without the wait, the state read
        right after the signal (the fault's evidence) may still say running."""
        self._signal(node_id, signal.SIGSTOP)
        deadline = time.monotonic() + timeout_s
        while self.node_state(node_id) == "running" and time.monotonic() < deadline:
            time.sleep(0.02)

    def resume_node(self, node_id: int) -> None:
        """SIGCONT a paused node; a node that is not paused is left alone."""
        if self.node_state(node_id) == "paused":
            self._signal(node_id, signal.SIGCONT)

    def _signal(self, node_id: int, sig: int) -> None:
        """Send a signal to a node's JVM (refused for processes we did not start)."""
        ref = self.node_ref(node_id)
        if ref is None:
            raise FaultError(f"node {node_id} has no process")
        process.send_signal(ref, sig)

    # --- cluster-wide views ---------------------------------------------------
    def read_quorum_state(self, node_id: int) -> dict | None:
        try:
            return json.loads((self.node_dir(node_id) / "data" / "__cluster_metadata-0" / "quorum-state").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def log_hint(self, node_id: int) -> str:
        return f"{self.node_dir(node_id)}/server.log"

    def node_status(self, node: NodeState) -> dict:
        node_state = self.node_state(node.id)
        return {"id": node.id, "roles": node.roles, "address": node.address, "namespace": node.namespace,
                "pid": node.process.pid if node.process else None, "state": node_state,
                "alive": node_state == "running", "paused": node_state == "paused"}

    def status_fields(self, st: ClusterState) -> dict:
        return {"backend": "local", "kafka_version": st.kafka_version, "network": st.network}

    def _dump_log_tails(self, lines: int = 15) -> None:
        try:
            ids = self.node_ids()
        except ClusterNotRunning:
            return
        for nid in ids:
            f = self.node_dir(nid) / "server.log"
            if f.exists():
                tail = f.read_text(errors="replace").splitlines()[-lines:]
                log.error("last lines of node %d's log:\n%s", nid, "\n".join(tail))


def java_argfile(args: Sequence[str]) -> str:
    """Pure: a `java @file` argument file holding `args`, one quoted argument a line (the launcher reads
    backslash escapes inside quotes)."""
    return "".join('"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"\n' for a in args)


def _choose_network(mode: str) -> bool:
    can = network.namespaces_supported()
    if mode == "netns" and not can:
        raise ClusterError("network mode netns needs root and iproute2 (`ip`); run as root or use --network loopback")
    if mode == "auto" and not can:
        log.warning("not root: nodes run on loopback ports; network faults are unavailable")
    return can and mode != "loopback"
