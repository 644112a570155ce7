"""A team's own compose project for the attach tests (imported as `users_projects`): started as the team starts
it (`docker compose -p P -f FILE up -d`, no kafkaproof variables), waited for until attaching would find every
node, removed after with its volumes; and its containers' ids and states."""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster.attached import inspect_project
from kafkaproof.cluster.external import free_ports
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

from support import wait_for


def containers(project: str) -> dict[str, tuple[str, str]]:
    """{container name: (id, state)} of every container of the project."""
    out = de.docker("ps", "-a", "--filter", f"label=com.docker.compose.project={project}",
                    "--format", "{{.Names}} {{.ID}} {{.State}}").stdout.split("\n")
    return {name: (cid, st) for name, cid, st in (line.split() for line in out if line.strip())}


def found_nodes(project: str, nodes: int) -> dict | None:
    """The project as `inspect` finds it once all `nodes` brokers answer metadata, else None."""
    try:
        found = inspect_project(project, timeout_s=3)
        return found if len(found["nodes"]) == nodes else None
    except Exception:
        return None


@contextlib.contextmanager
def users_project(file: Path, prefix: str, port_variable: str, nodes: int) -> Iterator[tuple[str, str, dict]]:
    """The project of `file` up on free host ports (`{port_variable}1`..N, one per node), yielding
    (project, bootstrap, what `inspect_project` finds) once every node answers; `down -v` after."""
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(DEFAULT_KAFKA_VERSION)
    project = f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 100000}"
    ports = free_ports("127.0.0.1", nodes)
    env = {**de.docker_env(), **{f"{port_variable}{i + 1}": str(p) for i, p in enumerate(ports)}}

    def compose(*args: str) -> None:
        subprocess.run(["docker", "compose", "-p", project, "-f", str(file), *args], check=True,
                       capture_output=True, text=True, timeout=300, env=env)

    compose("up", "-d")
    try:
        found = wait_for(lambda: found_nodes(project, nodes), 90, f"the {nodes} brokers of {project} to answer metadata",
                         interval=1)
        yield project, ",".join(f"localhost:{p}" for p in ports), found
    finally:
        compose("down", "-v", "--timeout", "0")
