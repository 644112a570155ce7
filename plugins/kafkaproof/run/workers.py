"""The producer and consumer processes of a run, and the events they report as they happen."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..cluster import process, procs
from ..errors import FaultError
from ..spec.connection import CONNECTION_ENV, java_properties
from ..spec.group_protocol import protocol_of, restart_config
from ..spec.versions import DEFAULT_KAFKA_VERSION
from . import java_driver

WORKLOAD_MODULE = "kafkaproof.run.workload"


def worker_env(connection: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment of a worker: this process's, with OpenBLAS on one thread, and the cluster's
    connection config (`CONNECTION_ENV`, JSON in the worker's client's names) if it has one.

    pyarrow imports numpy, whose OpenBLAS starts a spinning thread per core: a worker does no linear
    algebra, and those threads took about 3% of a producer's CPU from the client and the brokers.
    The connection config travels in the environment, not in the spec file, because it holds
    credentials and the spec files stay in the run directory."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop(CONNECTION_ENV, None)
    if connection:
        env[CONNECTION_ENV] = json.dumps(dict(connection))
    return env


class WorkerEvents:
    """Events the workers report as they happen (one UDP datagram each, on loopback): what triggers wait for.

    Consumers report each successful commit; a fault with `after: {event: consumer_commit}`
    is injected the moment the next one arrives, while that consumer processes its batch.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.counts: dict[tuple[str, int], int] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="worker-events", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096)
            except (socket.timeout, OSError):
                continue
            try:
                event = json.loads(data)
                key = (str(event["event"]), int(event["consumer"]))
            except (ValueError, KeyError, TypeError):
                continue
            with self._cond:
                self.counts[key] = self.counts.get(key, 0) + 1
                self._cond.notify_all()

    def count(self, event: str, consumer: int) -> int:
        with self._cond:
            return self.counts.get((event, consumer), 0)

    def wait_next(self, event: str, consumer: int, seen: int, timeout_s: float, stop: threading.Event) -> bool:
        """Wait until more than `seen` such events arrived; False on timeout or stop."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.counts.get((event, consumer), 0) <= seen:
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=2)
        self.sock.close()


class Workers:
    """Producer and consumer OS processes of one run; kills them all on close.

    Each worker is recorded in the process registry (`procs.py`) before anything relies on it and
    watches this process: if the runner dies, its workers stop within a second, and
    `kafkaproof cluster down --all` (or the teardown of the cluster they ran against) stops
    whatever is left.
    """

    def __init__(self, work: Path, base_spec: dict, owner: str, cluster: str | None = None,
                 connection: Mapping[str, Any] | None = None):
        self.work = work
        self.connection = dict(connection or {})
        self.base = {**base_spec, "parent_pid": os.getpid()}
        self.owner, self.cluster = owner, cluster
        self.producers: dict[int, subprocess.Popen] = {}
        self.consumers: dict[int, subprocess.Popen] = {}
        self.incarnations: dict[int, int] = {}
        self.readers: dict[int, subprocess.Popen] = {}  # an exactly-once pipeline's downstream readers
        self.consumer_specs: dict[int, dict] = {}  # what each consumer is started with (again) next
        self.started: list[dict[str, Any]] = []  # each consumer incarnation's group protocol (the manifest's)

    def _spawn(self, role: str, spec: dict, name: str) -> subprocess.Popen:
        """Start one worker: the Python (librdkafka) one, or the Java (kafka-clients) driver when the spec's
        `client` says `java` (on `client_version`); both read the same spec and write the same streams."""
        spec = dict(spec)
        client, version = spec.pop("client", "librdkafka"), spec.pop("client_version", None)
        path = self.work / f"{name}.spec.json"
        path.write_text(json.dumps(spec))
        if client == "java":
            cmd = java_driver.command(role, path, version or DEFAULT_KAFKA_VERSION)
            connection = java_properties(self.connection)
        else:
            cmd = [sys.executable, "-m", WORKLOAD_MODULE, role, str(path)]
            connection = self.connection
        errf = open(self.work / f"{name}.stderr.log", "ab")
        proc = subprocess.Popen(cmd, stdout=errf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work,
                                start_new_session=True, env=worker_env(connection))
        errf.close()
        try:
            procs.register(self.owner, name, process.ref_for(proc.pid), cluster=self.cluster, command=cmd)
        except FaultError:
            pass  # it died at once; its exit code tells
        return proc

    def start_producer(self, index: int, spec: dict) -> None:
        self.producers[index] = self._spawn("producer", {**self.base, **spec, "index": index}, f"producer-{index}")

    def start_consumer(self, index: int, spec: dict) -> None:
        """Start consumer `index` (a new incarnation) with `spec`; its client id names it (`kp-consumer-<i>-<inc>`,
        unless the scenario sets one) so the group's description shows which member it is."""
        inc = self.incarnations.get(index, -1) + 1
        self.incarnations[index] = inc
        self.consumer_specs[index] = spec
        config = {"client.id": f"kp-consumer-{index}-{inc}", **(spec.get("config") or {})}
        # an exactly-once pipeline's copier takes a consumer's place (spec `role`: copier, run/copier.py)
        self.consumers[index] = self._spawn(spec.get("role", "consumer"),
                                            {**self.base, **spec, "config": config, "index": index,
                                             "incarnation": inc}, f"consumer-{index}-{inc}")
        self.started.append({"consumer": index, "incarnation": inc, "group_protocol": protocol_of(config)})

    def reconfigure_consumer(self, index: int, config: Mapping[str, Any]) -> None:
        """Consumer `index` starts again (its next incarnation) with `config` over its current settings (null:
        removed)."""
        spec = self.consumer_specs[index]
        self.consumer_specs[index] = {**spec, "config": restart_config(spec.get("config") or {}, config)}

    def start_reader(self, index: int, spec: dict) -> None:
        """A downstream reader of an exactly-once pipeline's output (run/copier.py)."""
        self.readers[index] = self._spawn("reader", {**self.base, **spec, "index": index}, f"reader-{index}")

    def stop_readers(self, timeout_s: float = 20.0) -> None:
        _terminate(self.readers.values())
        _wait_all(self.readers.values(), timeout_s)

    def signal_consumer(self, index: int, sig: int) -> int:
        proc = self.consumers[index]
        if proc.poll() is not None:
            raise FaultError(f"consumer {index} is not running (exit code {proc.returncode})")
        os.kill(proc.pid, sig)
        return proc.pid

    def restart_consumer(self, index: int) -> None:
        proc = self.consumers[index]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            return
        self.start_consumer(index, self.consumer_specs[index])

    def producers_done(self) -> bool:
        return all(p.poll() is not None for p in self.producers.values())

    def stop_producers(self) -> None:
        """Ask every producer to stop sending (SIGTERM): it flushes what is in flight, bounded, and exits."""
        _terminate(self.producers.values())

    def stop_consumers(self, timeout_s: float = 20.0) -> None:
        _terminate(self.consumers.values())
        _wait_all(self.consumers.values(), timeout_s)

    def kill_all(self) -> None:
        procs_ = [*self.producers.values(), *self.consumers.values(), *self.readers.values()]
        _terminate(procs_)
        _wait_all(procs_, 10.0)
        procs.unregister(self.owner)

    def consumer_positions(self) -> dict[int, int]:
        """Highest next-fetch position per partition over the current consumer processes."""
        best: dict[int, int] = {}
        for index, inc in self.incarnations.items():
            try:
                p = json.loads((self.work / f"consumer-{index}-{inc}.progress.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            for part, pos in p.get("positions", {}).items():
                best[int(part)] = max(best.get(int(part), -1), pos)
        return best

    def progress(self) -> dict[str, Any]:
        total: dict[str, Any] = {"sent": 0, "ok": 0, "fail": 0, "indefinite": 0, "read": 0, "errors": {}}
        for f in self.work.glob("*.progress.json"):
            try:
                p = json.loads(f.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            for k in ("sent", "ok", "fail", "indefinite", "read"):
                total[k] += p.get(k, 0)
            for name, n in p.get("errors", {}).items():
                total["errors"][name] = total["errors"].get(name, 0) + n
        return total


def _terminate(processes: Iterable[subprocess.Popen]) -> None:
    """SIGTERM every live process, continued first: a stopped (paused) one would not act on it."""
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()


def _wait_all(procs, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
