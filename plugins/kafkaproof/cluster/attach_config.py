"""A broker's own config file, read from its container through the engine (the fallback of attaching when the
container's environment does not give the node id, roles or listeners: `attach_env.needs_config_file`).

Which file: the one a process of the container was started with (`docker top`: `kafka.Kafka FILE`,
`kafka-server-start.sh FILE`), else the images' known paths (`attach_env.KNOWN_CONFIG_PATHS`). How:
`docker exec CONTAINER cat FILE`, or for an image without `cat` the engine's archive of the file
(`docker cp CONTAINER:FILE -`). Read only: nothing in the container changes.
"""
from __future__ import annotations

import io
import subprocess
import tarfile

from . import docker_engine as de
from .attach_env import KNOWN_CONFIG_PATHS, ConfigFile, config_path_from_commands, parse_properties

READ_TIMEOUT_S = 20.0


def process_commands(container: str) -> list[str]:
    """The command lines of the container's processes (`docker top CONTAINER -eo args`); [] when unreadable."""
    proc = de.docker("top", container, "-eo", "args", check=False, timeout=READ_TIMEOUT_S)
    return proc.stdout.splitlines()[1:] if proc.returncode == 0 else []


def read_container_file(container: str, path: str) -> str | None:
    """A text file inside the container (exec cat, else the engine's archive of it); None when there is none."""
    proc = de.docker("exec", container, "cat", path, check=False, timeout=READ_TIMEOUT_S)
    if proc.returncode == 0:
        return proc.stdout
    try:  # images without a shell's tools: the engine's archive API
        archive = subprocess.run([de._docker_binary(), "cp", f"{container}:{path}", "-"], capture_output=True,
                                 env=de.docker_env(), timeout=READ_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    if archive.returncode != 0 or not archive.stdout:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            data = tar.extractfile(member) if member else None
            return data.read().decode("utf-8", errors="replace") if data else None
    except tarfile.TarError:
        return None


def read_config_file(container: str) -> ConfigFile:
    """The broker config file of `container` (see module docstring); `ConfigFile(None, ...)` naming the paths
    looked at when there is none."""
    named = config_path_from_commands(process_commands(container))
    looked = []
    for path in ([named] if named else []) + [p for p in KNOWN_CONFIG_PATHS if p != named]:
        text = read_container_file(container, path)
        if text is not None:
            return ConfigFile(path, parse_properties(text), tuple(looked))
        looked.append(path)
    return ConfigFile(None, {}, tuple(looked))
