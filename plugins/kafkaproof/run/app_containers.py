"""The application's services as containers of the compose backend (issue 39): start, ready, fault, stop.

A service given as `image:` (spec/application.py) runs as `docker run` of that image on the compose
cluster's network, after the cluster is ready:

- `{bootstrap}` in its command and env is the brokers' address *inside* that network (their bridge IPs),
  `{port}` the port it listens on in its container (`port:`), `{instance}`, `{topic}`, `{group}`,
  `{run_id}` as for a process. `command:` replaces the image's CMD.
- Its `port` is published on a free loopback port of this host (`-p 127.0.0.1:<host port>:<port>`):
  `{port}` in the readiness URL, the drive's and the processed source's URLs is that host port, so the
  HTTP driver reaches each instance from the host.
- Readiness: HTTP from the host through the published port, or a log line of `docker logs`.
- Every container carries the cluster's label (`io.kafkaproof.cluster=<project>`): `kafkaproof cluster down
  --all` removes what a crashed run left with the cluster's own containers, and nothing it did not create;
  and the run's (`io.kafkaproof.app-run=<run_id>`), which `stop_all` sweeps. Its output is saved to
  `<run_dir>/services/<name>-<i>.log` before it is removed (and whenever a readiness check fails).

A `compose_service:` (a service of the user's compose file, spec/compose_service.py) runs the same way:
`plan_containers` reads its definition, lays it under the scenario's service (command, environment,
port, entrypoint, working directory, user) and builds its image when it has `build:` (`build_image`:
`docker build` of its context, tagged `kafkaproof/app-<service>:<content hash>`, so an unchanged context is
not built again); `docker compose` is never run on the user's file.

`ContainerFleet` offers what the `app` fault family asks of a fleet (faults/families/app.py): kill is
`docker kill`, terminate `docker stop`, a pause `docker pause`, restart `docker kill` + `docker start` and
wait until ready. `plan_containers` checks the images before the cluster starts: `{example_app}` is the
example application's image, built locally from the cache's jars (`example_image`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..cluster import docker_engine as de
from ..errors import ApplicationError, ClusterError, ScenarioError
from ..spec.application import EXAMPLE_APP_IMAGE, ApplicationSection, ServiceSection, fill_placeholders
from ..spec.compose_service import ComposeBuild, apply_compose, load_compose_service
from . import example_app
from .services import FleetBase, http_ready, tail_of

log = logging.getLogger(__name__)

RUN_LABEL = "io.kafkaproof.app-run"
SERVICE_LABEL = "io.kafkaproof.app-service"
HASH_LABEL = "io.kafkaproof.content-hash"  # as scripts/docker-image.sh labels what it builds
EXAMPLE_IMAGE_REPOSITORY = "kafkaproof/signup-app"
BUILT_REPOSITORY = "kafkaproof/app-"  # + the scenario's service name: images built from a compose `build:`
BUILD_TIMEOUT_S = 1800.0
POLL_S = 0.25


@dataclass(frozen=True)
class ContainerTarget:
    """Where a run's containers go: the compose cluster's project (its label value and name prefix), its
    network and the brokers' bootstrap inside that network."""
    project: str
    network: str
    bootstrap: str


def container_target(cluster: Any) -> ContainerTarget:
    """The compose cluster's project, network and in-network bootstrap; ApplicationError for another backend
    or a cluster behind the fault proxy (its containers could not reach the proxies on this host's loopback)."""
    if getattr(cluster, "backend", None) != "compose":
        raise ApplicationError(f"image services need a compose cluster; this run's cluster is "
                               f"{getattr(cluster, 'backend', 'none')} (give the services as command: instead)")
    st = cluster.state()
    if st.proxy:
        raise ApplicationError("image services cannot run on a compose cluster with the fault proxy: "
                               "their clients reach the brokers inside the cluster's network")
    first = st.nodes[0]
    networks = json.loads(de.docker("inspect", "--type", "container", "-f", "{{json .NetworkSettings.Networks}}",
                                    first.container).stdout or "{}")
    network = next((name for name, n in networks.items() if (n or {}).get("IPAddress") == first.ip), None)
    if network is None:
        raise ApplicationError(f"node {first.id}'s container {first.container} has no address {first.ip} on any "
                               f"network (it is on {', '.join(networks) or 'none'})")
    bootstrap = ",".join(f"{n.ip}:{n.client_port}" for n in st.broker_nodes)
    return ContainerTarget(st.compose.project, network, bootstrap)


def example_image() -> str:
    """The example application's image, `kafkaproof/signup-app:<source hash>`: its jars (built with Maven
    into the cache) on kafkaproof's base image, built locally once per source hash."""
    jars = example_app.build()
    home = next(iter(jars.values())).parent
    return de.ensure_app_image(home, f"{EXAMPLE_IMAGE_REPOSITORY}:{home.name[:40]}")


@dataclass(frozen=True)
class ContainerPlan:
    """What the run's containers are, checked before the cluster starts: each container service as it runs
    (a compose definition applied), its image, and where a compose service came from (for the manifest)."""
    services: tuple[ServiceSection, ...]
    images: dict[str, str]
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)


def plan_containers(section: ApplicationSection, where: str,
                    build_example: Callable[[], str] = example_image) -> ContainerPlan:
    """The container services with their images, before the cluster starts: `{example_app}` built, a
    compose service's definition read and applied and its `build:` built, every other image checked on the
    engine (nothing is pulled). ScenarioError naming the field otherwise. Empty without container services."""
    services, images, sources = [], {}, {}
    for i, service in enumerate(section.services):
        at = f"{where}.services[{i}]"
        if service.compose is not None:
            definition = load_compose_service(service.compose, f"{at}.compose_service")
            service = apply_compose(service, definition, at)
            file_at = f"{at}.compose_service: {definition.ref.file}: services.{definition.ref.service}"
            images[service.name] = build_image(definition.build, service.name, f"{file_at}.build") \
                if definition.build else _local_image(definition.image, f"{file_at}.image")
            sources[service.name] = definition.source()
            for note in definition.notes:
                log.info("%s: %s", file_at, note)
        elif service.image == EXAMPLE_APP_IMAGE:
            images[service.name] = build_example()
        elif service.image is not None:
            images[service.name] = _local_image(service.image, f"{at}.image")
        else:
            continue
        services.append(service)
    return ContainerPlan(tuple(services), images, sources)


def _local_image(image: str, at: str) -> str:
    if de.docker("image", "inspect", image, check=False).returncode != 0:
        raise ScenarioError(f"{at}: no image {image} on the Docker engine {de.engine_url()}; build or load it "
                            f"there first (no registry is pulled from)")
    return image


def build_hash(build: ComposeBuild) -> str:
    """A short hash of everything the build reads: every file of the context (but `.git`), the Dockerfile,
    the build arguments and target. (A changed base image alone does not change it.)"""
    h = hashlib.sha256(json.dumps([build.dockerfile, sorted(build.args.items()), build.target]).encode())
    h.update(Path(build.dockerfile).read_bytes())
    for dirpath, dirnames, filenames in os.walk(build.context):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file():
                h.update(str(path.relative_to(build.context)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_image(build: ComposeBuild, service: str, at: str) -> str:
    """`docker build` of a compose service's `build:` on the engine, tagged `kafkaproof/app-<service>:<hash>`
    and labelled with its content hash: reused while the context, Dockerfile, args and target are unchanged.
    ScenarioError with the end of the build's output when it fails."""
    digest = build_hash(build)
    tag = f"{BUILT_REPOSITORY}{service}:{digest}"
    label = de.docker("image", "inspect", "-f", f'{{{{ index .Config.Labels "{HASH_LABEL}" }}}}', tag, check=False)
    if label.returncode == 0 and label.stdout.strip() == digest:
        return tag
    cmd = ["build", "--label", f"{HASH_LABEL}={digest}", "-t", tag, "-f", build.dockerfile]
    cmd += [a for k, v in build.args.items() for a in ("--build-arg", f"{k}={v}")]
    cmd += ["--target", build.target] if build.target else []
    started = time.monotonic()
    proc = de.docker(*cmd, build.context, check=False, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise ScenarioError(f"{at}: `docker build` of {build.context} failed:\n{tail_of(proc.stdout + proc.stderr)}")
    log.info("built %s from %s in %.1f s", tag, build.context, time.monotonic() - started)
    return tag


@dataclass
class _Container:
    spec: ServiceSection
    index: int
    port: int  # the host's loopback port the container's port is published on
    values: dict[str, str]  # placeholders inside the container
    log_path: Path
    name: str
    since: str | None = None  # this start's time (the engine's StartedAt) after a restart: its output since then
    started: float = 0.0

    @property
    def label(self) -> str:
        return f"service {self.spec.name} instance {self.index} (container {self.name})"

    @property
    def argv(self) -> list[str]:
        """The container's command (after the image's entrypoint), placeholders substituted; [] runs the image's CMD."""
        return [fill_placeholders(a, self.values) for a in self.spec.argv]

    def ready_url(self) -> str | None:
        if self.spec.ready_url is None:
            return None
        return fill_placeholders(self.spec.ready_url, {**self.values, "port": str(self.port)})

    def readiness(self) -> str:
        url = self.ready_url()
        return f"HTTP GET {url} answering 2xx" if url else f"a log line matching {self.spec.ready_log!r}"


class ContainerFleet(FleetBase):
    """The instances of the application's image services, started together on the cluster's network and always
    removed together (a context manager). The same interface as `run.services.ServiceFleet`; `start` gives
    each container the in-network `{bootstrap}` and its container `{port}`."""

    def __init__(self, specs: list[ServiceSection], images: Mapping[str, str], run_dir: Path, run_id: str,
                 target: ContainerTarget, grace_s: float = 5.0, sources: Mapping[str, dict] | None = None):
        """`specs` as they run (a compose definition applied: `plan_containers`); `sources`: where compose
        services came from, for the manifest."""
        super().__init__(specs, run_dir)
        self.images, self.run_id, self.target, self.grace_s = dict(images), run_id, target, grace_s
        self.sources = dict(sources or {})
        self.image_ids: dict[str, str] = {}

    def _prepare(self, spec: ServiceSection) -> None:
        self.image_ids[spec.name] = de.docker("image", "inspect", "-f", "{{.Id}}", self.images[spec.name]).stdout.strip()

    def _inside(self, spec: ServiceSection) -> dict[str, str]:
        return {"bootstrap": self.target.bootstrap, "port": str(spec.port)}

    def _new_instance(self, spec: ServiceSection, i: int, port: int, values: dict[str, str],
                      log_path: Path) -> _Container:
        return _Container(spec, i, port, values, log_path, f"{self.target.project}-app-{spec.name}-{i}")

    def _launch(self, inst: _Container) -> None:
        spec = inst.spec
        de.docker("rm", "-f", inst.name, check=False)  # a crashed run's container of this cluster
        labels = {de.CLUSTER_LABEL: self.target.project, RUN_LABEL: self.run_id, SERVICE_LABEL: f"{spec.name}-{inst.index}"}
        cmd = ["run", "-d", "--name", inst.name, "--network", self.target.network,
               "--network-alias", f"{spec.name}-{inst.index}", "-p", f"127.0.0.1:{inst.port}:{spec.port}"]
        cmd += [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
        cmd += [a for k, v in spec.env.items() for a in ("-e", f"{k}={fill_placeholders(v, inst.values)}")]
        cmd += [a for flag, v in (("--workdir", spec.workdir), ("--user", spec.user)) if v for a in (flag, v)]
        argv = inst.argv
        if spec.entrypoint is not None:  # as Compose: the first word replaces the image's, the rest lead the command
            cmd += ["--entrypoint", spec.entrypoint[0] if spec.entrypoint else ""]
            argv = [fill_placeholders(a, inst.values) for a in spec.entrypoint[1:]] + argv
        try:
            de.docker(*cmd, self.images[spec.name], *argv, timeout=120)
        except ClusterError as e:
            raise ApplicationError(f"{inst.label} could not start from {self.images[spec.name]}: {e}") from None
        inst.since, inst.started = None, time.monotonic()

    def _logs(self, inst: _Container, since: str | None = None) -> str:
        """The container's output (stdout, then stderr), all of it or since an engine timestamp."""
        proc = de.docker("logs", *(("--since", since) if since else ()), inst.name, check=False, timeout=60)
        return proc.stdout + proc.stderr if proc.returncode == 0 else ""

    def save_log(self, inst: _Container) -> str:
        """The container's output so far, written to its log file (kept when the container is gone)."""
        text = self._logs(inst)
        if text:
            inst.log_path.write_text(text)
        return text

    def _inspect(self, inst: _Container) -> dict[str, Any]:
        proc = de.docker("inspect", "--type", "container", "-f", "{{json .State}}", inst.name, check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else {}

    def _failure(self, inst: _Container, what: str) -> ApplicationError:
        self.save_log(inst)
        tail = tail_of(self._logs(inst, inst.since))
        return ApplicationError(f"{inst.label} {what} ({inst.readiness()}); last lines of {inst.log_path}:\n{tail}")

    def _await_ready(self, inst: _Container) -> None:
        deadline = inst.started + inst.spec.ready_timeout_s
        pattern = re.compile(inst.spec.ready_log, re.MULTILINE) if inst.spec.ready_log else None
        while True:
            st = self._inspect(inst)
            if not st.get("Running"):
                raise self._failure(inst, f"exited with code {st.get('ExitCode')} before it was ready")
            url = inst.ready_url()
            if http_ready(url) if url else pattern.search(self._logs(inst, inst.since)):
                return
            if time.monotonic() >= deadline:
                raise self._failure(inst, f"was not ready within {inst.spec.ready_timeout_s:g} s; raise its "
                                          f"readiness timeout or check the image")
            time.sleep(POLL_S)

    def state(self, name: str, i: int) -> str:
        """An instance's container now: 'running', 'paused' or 'dead'."""
        st = self._inspect(self._instance(name, i))
        return "paused" if st.get("Paused") else "running" if st.get("Running") else "dead"

    def pid(self, name: str, i: int) -> int | None:
        """The pid (on the engine's host) of an instance's main process while it runs, else None."""
        st = self._inspect(self._instance(name, i))
        return int(st["Pid"]) if st.get("Running") and st.get("Pid") else None

    def _wait_state(self, name: str, i: int, states: tuple[str, ...], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.state(name, i) not in states:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self, name: str, i: int) -> None:
        """`docker kill` (SIGKILL) one instance and wait until its container has stopped."""
        inst = self._instance(name, i)
        if self.state(name, i) != "dead":
            de.docker("kill", inst.name, check=False)
            self._wait_state(name, i, ("dead",), 10.0)

    def terminate(self, name: str, i: int, timeout_s: float = 30.0) -> bool:
        """`docker stop` (SIGTERM, SIGKILL after `timeout_s`; a paused one unpaused first); whether it stopped."""
        inst = self._instance(name, i)
        if self.state(name, i) == "paused":
            de.docker("unpause", inst.name, check=False)
        de.docker("stop", "--time", str(int(timeout_s)), inst.name, check=False, timeout=timeout_s + 30)
        return self._wait_state(name, i, ("dead",), 5.0)

    def stop(self, name: str, i: int) -> None:
        """Pause one instance (`docker pause`: every process of its container frozen)."""
        inst = self._instance(name, i)
        if self.state(name, i) != "running":
            raise ApplicationError(f"service {name} instance {i} is not running; cannot pause it")
        de.docker("pause", inst.name)

    def resume(self, name: str, i: int) -> None:
        """`docker unpause` a paused instance."""
        inst = self._instance(name, i)
        if self.state(name, i) != "paused":
            raise ApplicationError(f"service {name} instance {i} is not paused; cannot resume it")
        de.docker("unpause", inst.name)

    def _launch_again(self, inst: _Container) -> None:
        """`docker start` the same container (same published port; its output so far kept)."""
        try:
            de.docker("start", inst.name)
        except ClusterError as e:
            raise ApplicationError(f"{inst.label} could not start again: {e}") from None
        inst.since, inst.started = self._inspect(inst).get("StartedAt"), time.monotonic()

    def stop_all(self) -> None:
        """`docker stop` every instance at once (SIGTERM: they flush; SIGKILL after the grace period), save
        each one's output, remove them and whatever else carries the run's label. Safe to repeat."""
        names = [inst.name for inst in self.instances.values()]
        if names:
            paused = [inst.name for (n, i), inst in self.instances.items() if self.state(n, i) == "paused"]
            if paused:
                de.docker("unpause", *paused, check=False)
            de.docker("stop", "--time", str(int(self.grace_s)), *names, check=False, timeout=self.grace_s + 60)
            for inst in self.instances.values():
                self.save_log(inst)
        swept = de.docker("ps", "-a", "--filter", f"label={RUN_LABEL}={self.run_id}", "--format", "{{.Names}}",
                          check=False).stdout.split()
        if swept:
            de.docker("rm", "-f", *swept, check=False, timeout=120)

    def manifest(self) -> dict[str, Any]:
        """The images the services ran (reference and id; a compose service's file, service, build and notes)
        and the in-network bootstrap they were given."""
        return {"images": {name: {"image": self.images[name], "id": self.image_ids.get(name),
                                  **({"compose": self.sources[name]} if name in self.sources else {})}
                           for name in self.images},
                "network": self.target.network, "bootstrap": self.target.bootstrap}
