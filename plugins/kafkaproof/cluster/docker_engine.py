"""Helpers for the Docker Compose cluster backend: the engine, the image, compose, containers.

Everything goes through the `docker` CLI (and `docker compose`), so the same code works with
kafkaproof's own engine (scripts/docker-engine.sh), a system engine or a remote `DOCKER_HOST`.
Only what needs the container's kernel objects (`container_pid`, and `network.attach_netns`,
`network.host_veth` built on it) requires the engine to run on this host.

Network faults reuse `network.py` in one of two ways. With the engine on this host and root,
`network.attach_netns(container, "kp<s>n<id>")` names the container's network namespace like a local
node's (`ip netns attach`), so `ip netns exec kp<s>n<id> nft ...` acts inside the container
(a container started again gets a new namespace: attach it again after every (re)start).
Otherwise (an engine on another machine, or no root) the node's namespace is `docker:<container>`
and every nft/tc command runs in a short-lived tools container that shares the target's
network (`netns_command`: `docker run --rm --network container:<name> --cap-add NET_ADMIN`),
as Airflow's DockerOperator would run it; only the container's own end of its link exists then.

Everything kafkaproof creates carries the label `io.kafkaproof.cluster=<name>` (the compose
files set it on containers, networks and volumes); `remove_labelled(name)` removes exactly that.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ClusterError
from ..paths import share_dir

log = logging.getLogger(__name__)

CLUSTER_LABEL = "io.kafkaproof.cluster"
OWN_SOCKET = Path("/run/kafkaproof-docker/docker.sock")
DEFAULT_SOCKET = Path("/var/run/docker.sock")
IMAGE_REPOSITORY = "kafkaproof/kafka"
# The image of the tools containers entering a node's network (nft, tc): the base of our Kafka
# image has nftables and iproute2; any image with both works (e.g. nicolaka/netshoot).
KAFKA_IMAGE_ENV = "KAFKAPROOF_KAFKA_IMAGE"  # a Kafka image of the user's for every compose cluster
TOOLS_IMAGE_ENV = "KAFKAPROOF_TOOLS_IMAGE"
DEFAULT_TOOLS_IMAGE = "kafkaproof/base:bookworm"
TOOL_LABEL = "io.kafkaproof.tool"
TOOL_TARGET_LABEL = "io.kafkaproof.target"  # the container whose network a tools container joined
# Compose project names and label values we accept: what compose itself allows, kept short.
_CLUSTER_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_SCRIPT_TIMEOUT_S = 1800.0  # a first image build (debootstrap) or compose build takes minutes


def engine_url() -> str:
    """The Docker engine to use: `$DOCKER_HOST`, else the default socket, else kafkaproof's own.

    Cheap (no call to the engine); `ensure_engine()` checks that it answers and starts
    kafkaproof's own engine when nothing else does.
    """
    host = os.environ.get("DOCKER_HOST")
    if host:
        return host
    if DEFAULT_SOCKET.is_socket():
        return f"unix://{DEFAULT_SOCKET}"
    return f"unix://{OWN_SOCKET}"


def bind_engine(url: str) -> None:
    """Use the engine at `url` for the rest of this process (a cluster's engine, from its state file)."""
    if os.environ.get("DOCKER_HOST") not in (None, url):
        log.info("using the engine %s the cluster was started on (DOCKER_HOST was %s)", url, os.environ["DOCKER_HOST"])
    os.environ["DOCKER_HOST"] = url


def is_local_engine(url: str) -> bool:
    """Pure-ish: whether the engine at `url` runs on this machine (a unix socket that exists here)."""
    return url.startswith("unix://") and Path(url[len("unix://"):]).is_socket()


def tools_image() -> str:
    """The image of the tools containers that run nft/tc in a node's network (`$KAFKAPROOF_TOOLS_IMAGE`)."""
    return os.environ.get(TOOLS_IMAGE_ENV) or DEFAULT_TOOLS_IMAGE


def netns_command(container: str) -> list[str]:
    """Command prefix running a program in `container`'s network namespace through the engine: a
    tools container with `--network container:<name>` and NET_ADMIN, removed when it exits, labelled with
    its target (`remove_tools` sweeps what a killed command left)."""
    return [_docker_binary(), "-H", engine_url(), "run", "--rm", "-i", "--network", f"container:{container}",
            "--cap-add", "NET_ADMIN", "--label", f"{TOOL_LABEL}=netns", "--label", f"{TOOL_TARGET_LABEL}={container}",
            "--entrypoint", "", tools_image()]


def remove_tools(targets: Sequence[str]) -> list[str]:
    """Remove (force) the tools containers still running in the network of any of `targets` (a command killed
    while it ran leaves its container); only containers with kafkaproof's tool label. Returns their ids."""
    ids: list[str] = []
    for target in targets:
        ids += docker("ps", "-a", "--filter", f"label={TOOL_LABEL}", "--filter", f"label={TOOL_TARGET_LABEL}={target}",
                      "--format", "{{.ID}}").stdout.split()
    if ids:
        docker("rm", "-f", *ids)
        log.info("removed tools containers %s left in the networks of %s", ids, list(targets))
    return ids


def ensure_tools_image() -> str:
    """The tools image, checked to be on the engine (ClusterError saying how to get it otherwise)."""
    image = tools_image()
    if docker("image", "inspect", image, check=False).returncode != 0:
        hint = ("`bash scripts/docker-image.sh <kafka version>` builds it" if image == DEFAULT_TOOLS_IMAGE
                else f"`docker pull {image}`, or unset {TOOLS_IMAGE_ENV} to use {DEFAULT_TOOLS_IMAGE}")
        raise ClusterError(f"network faults on containers need the tools image {image} on {engine_url()}: {hint}")
    return image


def docker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for docker/compose commands: ours, with DOCKER_HOST set, plus `extra`."""
    env = dict(os.environ)
    env["DOCKER_HOST"] = engine_url()
    env.update(extra or {})
    return env


def _docker_binary() -> str:
    found = shutil.which("docker")
    if not found:
        raise ClusterError("no `docker` CLI on PATH: run `make setup` (bash scripts/docker-engine.sh installs "
                           "Debian's docker.io), or install the Docker CLI")
    return found


def docker(*args: str, check: bool = True, timeout: float = 120.0, input: str | None = None) -> subprocess.CompletedProcess:
    """Run `docker ARGS` against `engine_url()`; ClusterError with its stderr when it fails and `check`."""
    cmd = [_docker_binary(), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=docker_env(), timeout=timeout, input=input)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"`docker {' '.join(args)}` did not finish within {timeout:.0f}s "
                           f"(engine {engine_url()}); is the engine overloaded or hung?") from e
    if check and proc.returncode != 0:
        raise ClusterError(f"`docker {' '.join(args)}` failed ({proc.returncode}) on {engine_url()}: "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _script(name: str) -> Path:
    path = share_dir("scripts") / name
    if not path.exists():
        raise ClusterError(f"{path} not found: the compose backend builds the engine, image and compose CLI "
                           f"with kafkaproof's Docker scripts")
    return path


def _run_script(name: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run one of our scripts, return its last stdout line; its stderr (progress) goes to our log."""
    path = _script(name)
    try:
        proc = subprocess.run(["bash", str(path), *args], capture_output=True, text=True,
                              env={**os.environ, **(env or {})}, timeout=_SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"scripts/{name} {' '.join(args)} did not finish within {_SCRIPT_TIMEOUT_S:.0f}s") from e
    for line in proc.stderr.strip().splitlines():
        log.info("%s", line)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise ClusterError(f"scripts/{name} {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")
    return lines[-1]


def ensure_engine() -> str:
    """Make sure an engine answers (starting kafkaproof's own if needed); returns and exports its URL."""
    url = _run_script("docker-engine.sh")
    os.environ["DOCKER_HOST"] = url
    return url


def ensure_image(version: str) -> str:
    """Build `kafkaproof/kafka:<version>` unless it is there and current; returns the image name."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ClusterError(f"Kafka version {version!r} is not of the form X.Y.Z")
    return _run_script("docker-image.sh", version, env={"DOCKER_HOST": engine_url()})


def ensure_app_image(jar_dir: Path, image: str) -> str:
    """Build `image` (repository:tag) from kafkaproof's base image and the jars in `jar_dir` (at /app/ in the
    image) unless it is there with the same content; returns the image name (`scripts/docker-image.sh --app`)."""
    return _run_script("docker-image.sh", "--app", str(jar_dir), image, env={"DOCKER_HOST": engine_url()})


def ensure_pulled(image: str) -> str:
    """A user's image (apache/kafka:4.1.0, a registry's): used when the engine has it, pulled otherwise."""
    if docker("image", "inspect", image, check=False).returncode == 0:
        return image
    log.info("pulling %s on %s", image, engine_url())
    proc = docker("pull", image, check=False, timeout=900)
    if proc.returncode != 0:
        raise ClusterError(f"image {image} is not on {engine_url()} and `docker pull` failed: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}\n(no registry reachable? build or load it "
                           f"there, or leave the image unset for kafkaproof/kafka:<version>, built locally)")
    return image


def ensure_compose_cli() -> None:
    """Make sure `docker compose` (the v2+ plugin) works, building it from the Go module proxy if needed."""
    _run_script("docker-compose-cli.sh")


def compose_file(topology: str) -> Path:
    """The compose file of a topology: `compose/<topology>.yml` of the checkout or of the installed package."""
    compose_dir = share_dir("compose")
    path = compose_dir / f"{topology}.yml"
    if not path.exists():
        known = sorted(p.stem for p in compose_dir.glob("*.yml"))
        raise ClusterError(f"no compose file for topology {topology!r}; known: {', '.join(known) or 'none'}")
    return path


def check_cluster(cluster: str) -> str:
    """Validate a cluster name used as compose project and label value; returns it."""
    if not _CLUSTER_RE.match(cluster):
        raise ClusterError(f"cluster name {cluster!r} is invalid for compose: use lowercase letters, digits, "
                           f"'-' and '_' (at most 63, starting with a letter or digit)")
    return cluster


def compose(args: Sequence[str], project: str, env: Mapping[str, str] | None = None,
            files: Sequence[Path | str] = (), check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Run `docker compose -p PROJECT [-f FILE ...] ARGS`.

    The project name is also passed as `KAFKAPROOF_CLUSTER`, which our compose files use for
    container names and the `io.kafkaproof.cluster` label. `env` adds variables the compose
    file interpolates (e.g. KAFKAPROOF_NET_PREFIX, KAFKA_VERSION, KAFKA_MIN_INSYNC_REPLICAS).
    """
    check_cluster(project)
    cmd = [_docker_binary(), "compose", "-p", project]
    for f in files:
        cmd += ["-f", str(f)]
    cmd += list(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=docker_env({"KAFKAPROOF_CLUSTER": project, **(env or {})}))
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"`docker compose {' '.join(args)}` (project {project}) did not finish within "
                           f"{timeout:.0f}s") from e
    if check and proc.returncode != 0:
        hint = ""
        if "is not a docker command" in proc.stderr or "unknown command" in proc.stderr:
            hint = " (the compose plugin is missing: run `bash scripts/docker-compose-cli.sh`)"
        raise ClusterError(f"`docker compose {' '.join(args)}` (project {project}) failed ({proc.returncode})"
                           f"{hint}:\n{proc.stderr.strip()[-2000:]}")
    return proc


def _inspect(container: str) -> dict:
    proc = docker("inspect", "--type", "container", container, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"no container {container!r} on {engine_url()}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)[0]


def container_mounts(name: str) -> list[dict]:
    """A container's mounts as `docker inspect` lists them (`Type`, `Name`, `Source` on the engine's host,
    `Destination` inside)."""
    return list(_inspect(name).get("Mounts") or [])


def container_pid(name: str) -> int:
    """PID (in this host's pid namespace) of a running container's init process (the JVM)."""
    st = _inspect(name)["State"]
    pid = int(st.get("Pid") or 0)
    if not st.get("Running") or pid <= 0:
        raise ClusterError(f"container {name} is not running (status {st.get('Status')}): start it first")
    if not Path(f"/proc/{pid}/ns/net").exists():
        raise ClusterError(f"container {name} has pid {pid}, which is not a process on this host: network "
                           f"faults inside containers need the Docker engine on this machine, not {engine_url()}")
    return pid


def container_ip(name: str, network_name: str) -> str:
    """The container's IPv4 address on a docker network (as compose names it, e.g. `<project>_kafka`)."""
    networks = _inspect(name)["NetworkSettings"].get("Networks") or {}
    if network_name not in networks:
        raise ClusterError(f"container {name} is not attached to network {network_name!r} "
                           f"(it is on: {', '.join(sorted(networks)) or 'none'})")
    ip = networks[network_name].get("IPAddress")
    if not ip:
        raise ClusterError(f"container {name} has no address on {network_name} (is it running?)")
    return ip


def labelled(cluster: str) -> dict[str, list[str]]:
    """Names of the containers, networks and volumes labelled `io.kafkaproof.cluster=<cluster>`."""
    flt = f"label={CLUSTER_LABEL}={check_cluster(cluster)}"
    return {
        "containers": docker("ps", "-a", "--filter", flt, "--format", "{{.Names}}").stdout.split(),
        "networks": docker("network", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.split(),
        "volumes": docker("volume", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.split(),
    }


def remove_labelled(cluster: str) -> dict[str, list[str]]:
    """Remove (force) every container, then network and volume labelled with `cluster`; returns what went.

    Touches nothing without the label, so other projects on the same engine are safe.
    """
    found = labelled(cluster)
    if found["containers"]:
        docker("rm", "-f", "-v", *found["containers"], timeout=180)
    for net in found["networks"]:
        docker("network", "rm", net)
    if found["volumes"]:
        docker("volume", "rm", "-f", *found["volumes"])
    left = labelled(cluster)
    if any(left.values()):
        raise ClusterError(f"could not remove everything of cluster {cluster}: {left} "
                           f"(try `docker rm -f`, `docker network rm`, `docker volume rm` by hand)")
    if any(found.values()):
        log.info("removed cluster %s: %s", cluster, found)
    return found
