"""Run a user's application services as black boxes: start, wait until ready, fault, stop (issue 39).

A `ServiceSpec` says how to start one service (its command line, working directory, environment,
how many instances) and how to tell it is ready (an HTTP URL answering 2xx, or a log line matching
a regex). A `ServiceFleet` starts every instance in a process group of its own, with stdout and
stderr in `<run_dir>/services/<name>-<i>.log`, records it in the process registry
(`cluster/procs.py`, role "service") before waiting for it, so `kafkaproof cluster down --all` stops
what a crashed run left, and always stops them all again (it is a context manager). A run starts its application's services with
it (`run/app_run.py`).
"""
from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..cluster import procs, process
from ..cluster.external import free_ports
from ..cluster.process import ProcessRef
from ..errors import ApplicationError
from ..spec.application import RUN_PLACEHOLDERS, fill_placeholders

ROLE = "service"
LOG_TAIL_LINES = 10


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the application: `ready_url` (HTTP, 2xx) or `ready_log` (a regex), exactly one."""
    name: str
    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    instances: int = 1
    ready_url: str | None = None
    ready_log: str | None = None
    ready_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise ApplicationError(f"service name {self.name!r}: use letters, digits, '_', '.', '-'")
        if not self.argv:
            raise ApplicationError(f"service {self.name}: argv is empty; give the command that starts it")
        if self.instances < 1:
            raise ApplicationError(f"service {self.name}: instances must be at least 1, not {self.instances}")
        if (self.ready_url is None) == (self.ready_log is None):
            raise ApplicationError(f"service {self.name}: give exactly one readiness check, "
                                   f"ready_url (HTTP, 2xx) or ready_log (a regex of a log line)")
        if self.ready_log is not None:
            try:
                re.compile(self.ready_log)
            except re.error as e:
                raise ApplicationError(f"service {self.name}: ready_log {self.ready_log!r} is not a regex: {e}") from None


def http_ready(url: str) -> bool:
    """Whether `url` answers a GET with 2xx within a second (any error or other status: not yet)."""
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):  # HTTPError: non-2xx
        return False


def tail_of(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """Pure: the last `lines` lines of a log, or "(empty)"."""
    last = text.splitlines()[-lines:]
    return "\n".join(last) if last else "(empty)"


@dataclass
class _Instance:
    spec: ServiceSpec
    index: int
    port: int
    values: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    ref: ProcessRef | None = None
    log_offset: int = 0  # where this start's output begins in the (appended) log
    started: float = 0.0  # time.monotonic() of this start

    @property
    def label(self) -> str:
        return f"service {self.spec.name} instance {self.index}"

    @property
    def argv(self) -> list[str]:
        """The command line this instance runs: the spec's with its placeholders substituted."""
        return [fill_placeholders(a, self.values) for a in self.spec.argv]

    def readiness(self) -> str:
        if self.spec.ready_url is not None:
            return f"HTTP GET {fill_placeholders(self.spec.ready_url, self.values)} answering 2xx"
        return f"a log line matching {self.spec.ready_log!r}"

    def log_tail(self) -> str:
        try:
            return tail_of(self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return tail_of("")

    def is_ready(self) -> bool:
        if self.spec.ready_log is not None:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode(errors="replace")
            return re.search(self.spec.ready_log, text, re.MULTILINE) is not None
        return http_ready(fill_placeholders(self.spec.ready_url, self.values))

    def signal_group(self, sig: int) -> bool:
        """Signal the instance's process group while its leader is the process we started; False if gone."""
        if self.popen is not None:
            self.popen.poll()  # reap a dead leader so it reads as dead
        if process.state_of(self.ref) == "dead":
            return False
        try:
            os.killpg(self.ref.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait_state(self, state: str, timeout_s: float = 2.0) -> None:
        """Wait until the leader reads as `state` (signals are delivered asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while process.state_of(self.ref) not in (state, "dead") and time.monotonic() < deadline:
            time.sleep(0.01)

    def wait_gone(self, timeout_s: float) -> bool:
        return process.wait_dead(self.ref, timeout_s, reap=self.popen.poll) if self.ref else True


class FleetBase(ABC):
    """What the fleets of processes (`ServiceFleet`) and containers (`run.app_containers.ContainerFleet`)
    share: their instances by (service, index), started together (each with a free loopback port) and
    always stopped together (a context manager). Subclasses say how one instance is made, launched, waited
    for and how they all stop."""

    def __init__(self, specs: list, run_dir: Path):
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ApplicationError(f"service names must be unique, got {names}")
        self.specs = specs
        self.log_dir = Path(run_dir) / "services"
        self.instances: dict[tuple[str, int], object] = {}

    def __enter__(self) -> "FleetBase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, placeholders: Mapping[str, str]) -> None:
        """Start every instance (with `{bootstrap}`, `{topic}`, `{group}`, `{run_id}` from `placeholders`,
        `{instance}` and a free `{port}` each, unless the subclass says otherwise) and wait until each is
        ready; on a failure stop them all and raise `ApplicationError` naming the instance, its readiness
        check and its last log lines."""
        missing = [p for p in RUN_PLACEHOLDERS if p not in placeholders]
        if missing:
            raise ApplicationError(f"services need the run's {', '.join(missing)} to start")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports = iter(free_ports("127.0.0.1", sum(s.instances for s in self.specs)))
        try:
            for spec in self.specs:
                self._prepare(spec)
                for i in range(spec.instances):
                    port = next(ports)
                    values = {**{k: str(placeholders[k]) for k in RUN_PLACEHOLDERS},
                              "instance": str(i), "port": str(port), **self._inside(spec)}
                    inst = self._new_instance(spec, i, port, values, self.log_dir / f"{spec.name}-{i}.log")
                    self.instances[(spec.name, i)] = inst
                    self._launch(inst)
            for inst in self.instances.values():
                self._await_ready(inst)
        except BaseException:
            self.stop_all()
            raise

    def _prepare(self, spec) -> None:
        """Before a service's instances start (nothing here)."""

    def _inside(self, spec) -> dict[str, str]:
        """Placeholders the service sees differently from the host (none here: it runs on the host)."""
        return {}

    def _instance(self, name: str, i: int):
        try:
            return self.instances[(name, i)]
        except KeyError:
            raise ApplicationError(f"no instance {i} of service {name}; running: "
                                   f"{', '.join(f'{n}-{j}' for n, j in self.instances) or 'none'}") from None

    def restart(self, name: str, i: int) -> None:
        """Kill one instance if it runs, start it again (same port, its log kept) and wait until ready."""
        inst = self._instance(name, i)
        self.kill(name, i)
        self._launch_again(inst)
        try:
            self._await_ready(inst)
        except ApplicationError:
            self.kill(name, i)
            raise

    def _launch_again(self, inst) -> None:
        """Start a killed instance again: as the first time here."""
        self._launch(inst)

    @abstractmethod
    def kill(self, name: str, i: int) -> None:
        """Kill one instance at once (SIGKILL, or the engine's kill)."""

    @abstractmethod
    def _new_instance(self, spec, i: int, port: int, values: dict[str, str], log_path: Path):
        """One instance of `spec`, not started."""

    @abstractmethod
    def _launch(self, inst) -> None:
        """Start one instance."""

    @abstractmethod
    def _await_ready(self, inst) -> None:
        """Wait until one instance is ready; ApplicationError naming it, its check and its last log lines."""

    @abstractmethod
    def stop_all(self) -> None:
        """Stop every instance and forget them."""


class ServiceFleet(FleetBase):
    """The instances of some services as processes, started together and always stopped together.

    `owner` names them in the process registry (e.g. `<run_id>-services`); everything registered
    under it is forgotten by `stop_all`, so do not share it with other processes of the run.
    """

    def __init__(self, specs: list[ServiceSpec], run_dir: Path, owner: str, cluster: str | None = None,
                 grace_s: float = 5.0):
        super().__init__(specs, run_dir)
        self.owner = owner
        self.cluster = cluster
        self.grace_s = grace_s

    def _new_instance(self, spec: ServiceSpec, i: int, port: int, values: dict[str, str], log_path: Path) -> _Instance:
        return _Instance(spec, i, port, values, log_path)

    def _launch(self, inst: _Instance) -> None:
        spec = inst.spec
        argv = inst.argv
        env = {**os.environ, **{k: fill_placeholders(v, inst.values) for k, v in spec.env.items()}}
        with open(inst.log_path, "ab") as log_file:
            inst.log_offset = log_file.tell()
            try:
                inst.popen = subprocess.Popen(argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                                              stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                raise ApplicationError(f"{inst.label} could not start {argv[0]!r}: {e}") from None
        inst.ref = process.ref_for(inst.popen.pid)
        procs.register(self.owner, ROLE, inst.ref, cluster=self.cluster, command=argv)
        inst.started = time.monotonic()

    def _await_ready(self, inst: _Instance) -> None:
        deadline = inst.started + inst.spec.ready_timeout_s
        while True:
            code = inst.popen.poll()
            if code is not None:
                raise ApplicationError(
                    f"{inst.label} exited with code {code} before it was ready ({inst.readiness()}); "
                    f"last lines of {inst.log_path}:\n{inst.log_tail()}")
            if inst.is_ready():
                return
            if time.monotonic() >= deadline:
                raise ApplicationError(
                    f"{inst.label} was not ready within {inst.spec.ready_timeout_s:g} s ({inst.readiness()}); "
                    f"raise its readiness timeout or check the service; last lines of {inst.log_path}:\n"
                    f"{inst.log_tail()}")
            time.sleep(0.05)

    def pid(self, name: str, i: int) -> int | None:
        """The pid of an instance's process while it runs, else None."""
        return self._instance(name, i).ref.pid if self.state(name, i) != "dead" else None

    def kill(self, name: str, i: int) -> None:
        """SIGKILL one instance (its whole process group) and wait until it is gone."""
        inst = self._instance(name, i)
        if inst.signal_group(signal.SIGKILL):
            inst.wait_gone(5.0)

    def state(self, name: str, i: int) -> str:
        """An instance's process now: 'running', 'paused' or 'dead'."""
        inst = self._instance(name, i)
        if inst.popen is None:
            return "dead"
        inst.popen.poll()
        return process.state_of(inst.ref)

    def terminate(self, name: str, i: int, timeout_s: float = 30.0) -> bool:
        """SIGTERM one instance's group (SIGCONT first, so a paused one can act on it) and wait up to `timeout_s`
        until it is gone; whether it is (one that ignores SIGTERM is left running)."""
        inst = self._instance(name, i)
        if inst.signal_group(signal.SIGCONT):
            inst.signal_group(signal.SIGTERM)
        return inst.wait_gone(timeout_s)

    def stop(self, name: str, i: int) -> None:
        """Pause one instance (SIGSTOP to its process group); returns once it is paused."""
        inst = self._instance(name, i)
        if not inst.signal_group(signal.SIGSTOP):
            raise ApplicationError(f"service {name} instance {i} is not running; cannot pause it")
        inst.wait_state("paused")

    def resume(self, name: str, i: int) -> None:
        """Resume a paused instance (SIGCONT); returns once it runs again."""
        inst = self._instance(name, i)
        if not inst.signal_group(signal.SIGCONT):
            raise ApplicationError(f"service {name} instance {i} is not running; cannot resume it")
        inst.wait_state("running")

    def stop_all(self) -> None:
        """SIGTERM every instance's group (SIGKILL after the grace period to what is left of it, children that
        outlived their leader included) and forget them in the registry."""
        for inst in self.instances.values():
            if inst.popen is not None:
                inst.popen.poll()  # reap a dead leader so it reads as dead
        groups = [(inst, pgid) for inst in self.instances.values()
                  if inst.ref is not None and (pgid := process.led_group(inst.ref)) is not None]
        for inst, _ in groups:  # signal all first so they stop in parallel
            if inst.signal_group(signal.SIGCONT):
                inst.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for inst, pgid in groups:
            process.kill_group_after(inst.ref, pgid, max(0.0, deadline - time.monotonic()), reap=inst.popen.poll)
        procs.unregister(self.owner)
