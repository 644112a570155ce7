"""A service of the user's own compose file as an application service (issue 39): read, check, apply.

A scenario's service may say `compose_service: {file: ../deploy/docker-compose.yml, service: signup}`
(the file relative to the scenario file). kafkaproof reads that one service's definition the way Docker
Compose would and runs it as the run's own container, like an `image:` service (run/app_containers.py);
it never runs `docker compose` on the user's file, so the user's compose project is left alone.

What is read, as Compose reads it:
- the file's variables: `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR:+alt}`,
  `$VAR` and `$$` (a literal `$`), from this process's environment, then the `.env` beside the file;
- `image`, or `build` (a context directory, or `context`, `dockerfile`, `args`, `target`): the image is
  built locally (run/app_containers.py), never pulled;
- `command` and `entrypoint` (a list, or a string split like a shell would);
- `env_file` (one or more files, relative to the compose file) then `environment` (a mapping, or a list of
  `NAME=value`; a name without a value takes this process's variable);
- `working_dir`, `user`; `ports` (and `expose`): the first one's container port is the service's `port`
  unless the scenario gives one.

Keys kafkaproof does without are ignored with a note in the manifest (`IGNORED`: it starts the cluster,
names the containers, checks readiness itself); any other key (volumes, network_mode, ...) is refused
naming the file and the field, since running the service without it would test something else.

The scenario's own `command` replaces the compose file's, its `env` is laid over the compose
environment and its `port` wins: that is where the run's `{bootstrap}`, `{topic}`, `{port}` ... go.
Those placeholders may also be written in the compose file's values; other `{...}` are kept as written.

`parse_compose_ref` and `read_service` and `apply_compose` are pure; `load_compose_service` reads the files.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from ..errors import ScenarioError

REF_FIELDS = ("file", "service")
HONOURED = ("image", "build", "command", "entrypoint", "environment", "env_file", "working_dir", "user", "ports",
            "expose")
# Compose keys that only concern how Compose itself starts and wires the service: kafkaproof does that its
# own way (the cluster, container names, readiness), so leaving them out changes nothing the run tests.
IGNORED = {
    "healthcheck": "kafkaproof checks readiness with the scenario's ready:",
    "depends_on": "kafkaproof starts the cluster first, then the services",
    "container_name": "kafkaproof names the run's containers",
    "restart": "a stopped container stays stopped until a fault's heal starts it again",
    "networks": "the container joins the cluster's network",
    "hostname": "the container is reached as <service>-<instance> on the cluster's network",
    "labels": "the container carries kafkaproof's labels",
    "logging": "kafkaproof keeps each container's output in the run directory",
    "profiles": "the service is named explicitly",
    "pull_policy": "no image is pulled",
    "stop_grace_period": "kafkaproof stops containers with its own grace period",
}
BUILD_FIELDS = ("context", "dockerfile", "args", "target")
BUILD_IGNORED = {"labels": "kafkaproof labels the image with its content hash",
                 "cache_from": "no registry is used"}
_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}|([A-Za-z_][A-Za-z0-9_]*)"
                  r"|(\{))")
_PORT = re.compile(r"(?:(?:\[[^\]]*\]|[0-9.]+):)?(?:(\d+(?:-\d+)?):)?(\d+)(?:-(\d+))?(?:/(tcp|udp))?")


@dataclass(frozen=True)
class ComposeRef:
    """Where a service is defined: the compose `file` (absolute) and the `service`'s name in it."""
    file: str
    service: str


@dataclass(frozen=True)
class ComposeBuild:
    """How the service's image is built: `docker build` of `context` with `dockerfile` (absolute paths)."""
    context: str
    dockerfile: str
    args: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None


@dataclass(frozen=True)
class ComposeService:
    """One service's definition as kafkaproof runs it (variables substituted, env files read)."""
    ref: ComposeRef
    image: str | None
    build: ComposeBuild | None
    command: tuple[str, ...] | None
    entrypoint: tuple[str, ...] | None
    environment: Mapping[str, str]
    working_dir: str | None
    user: str | None
    ports: tuple[int, ...]
    notes: tuple[str, ...] = ()

    def source(self) -> dict[str, Any]:
        """For the manifest: where the service came from and what of it was ignored."""
        build = dataclasses.asdict(self.build) if self.build else None
        return {"file": self.ref.file, "service": self.ref.service, "image": self.image, "build": build,
                "notes": list(self.notes)}


def parse_compose_ref(data: Any, where: str, base_dir: Path | None) -> ComposeRef:
    """Pure: `compose_service` at `where`: `{file, service}`, the file resolved against `base_dir` (the
    scenario file's directory; the current one when None). ScenarioError naming the field otherwise."""
    if not isinstance(data, Mapping) or set(data) != set(REF_FIELDS):
        raise ScenarioError(f"{where}: must be a mapping with file (a compose file, relative to the scenario "
                            f"file) and service (a service in it), e.g. {{file: ../docker-compose.yml, "
                            f"service: signup}}; got {data!r}")
    for key in REF_FIELDS:
        if not isinstance(data[key], str) or not data[key]:
            raise ScenarioError(f"{where}.{key}: must be a non-empty string; got {data[key]!r}")
    return ComposeRef(scenario_path(data["file"], base_dir), data["service"])


def scenario_path(path: str, base_dir: Path | None) -> str:
    """Pure path arithmetic: `path` against the scenario's directory (the current one without it)."""
    return os.path.normpath(os.path.join(os.path.abspath(base_dir if base_dir is not None else "."),
                                         os.path.expanduser(path)))


def interpolate(text: str, variables: Mapping[str, str], where: str) -> str:
    """Pure: Compose's variable substitution in one value; ScenarioError for `${VAR:?message}` of an
    unset variable or a malformed `${`."""
    def sub(m: re.Match) -> str:
        if m.group(1):
            return "$"
        if m.group(6):
            raise ScenarioError(f"{where}: invalid interpolation in {text!r} (write $$ for a literal $)")
        name = m.group(2) or m.group(5)
        value, op, arg = variables.get(name), m.group(3), m.group(4)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op in (":-", "-"):
            return interpolate(arg, variables, where) if unset else value
        if op in (":?", "?"):
            if unset:
                raise ScenarioError(f"{where}: variable {name} is not set: {arg or 'required'}")
            return value
        if op in (":+", "+"):
            return "" if unset else interpolate(arg, variables, where)
        return value or ""
    return _VAR.sub(sub, text)


def _interpolate_all(node: Any, variables: Mapping[str, str], where: str) -> Any:
    if isinstance(node, str):
        return interpolate(node, variables, where)
    if isinstance(node, Mapping):
        return {k: _interpolate_all(v, variables, f"{where}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate_all(v, variables, f"{where}[{i}]") for i, v in enumerate(node)]
    return node


def parse_env_text(text: str, variables: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pure: an env file (`NAME=value` lines; `#` comments and blank lines skipped; `export ` allowed; a
    value in matching quotes taken as is; a bare `NAME` takes `variables[NAME]` when set)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq:
            if variables is not None and name in variables:
                out[name] = variables[name]
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[name] = value
    return out


def _scalar(value: Any, at: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ScenarioError(f"{at}: must be a string or a number (quote true/false); got {value!r}")
    return str(value)


def _pairs(data: Any, at: str, variables: Mapping[str, str]) -> dict[str, str]:
    """A Compose mapping-or-list of NAME=value (`environment`, `build.args`); a name alone or a null value
    takes `variables`' (left out when unset)."""
    if isinstance(data, list):
        items = []
        for i, entry in enumerate(data):
            if not isinstance(entry, str) or not entry or entry.startswith("="):
                raise ScenarioError(f"{at}[{i}]: must be NAME=value or NAME; got {entry!r}")
            name, eq, value = entry.partition("=")
            items.append((name, value if eq else None))
    elif isinstance(data, Mapping):
        items = [(str(k), None if v is None else _scalar(v, f"{at}.{k}")) for k, v in data.items()]
    else:
        raise ScenarioError(f"{at}: must be a mapping or a list of NAME=value; got {data!r}")
    out = {}
    for name, value in items:
        if value is None:
            if name in variables:
                out[name] = variables[name]
        else:
            out[name] = value
    return out


def _argv(data: Any, at: str) -> tuple[str, ...]:
    if isinstance(data, str):
        try:
            return tuple(shlex.split(data))
        except ValueError as e:
            raise ScenarioError(f"{at}: {data!r} cannot be split into arguments: {e}") from None
    if isinstance(data, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in data):
        return tuple(str(a) for a in data)
    raise ScenarioError(f"{at}: must be a string or a list of strings; got {data!r}")


def container_port(entry: Any, at: str) -> int:
    """Pure: the container port of one `ports`/`expose` entry (`8080`, `"8080:8080"`,
    `"127.0.0.1:9000:8080/tcp"`, `{target: 8080}`); ScenarioError for a range or anything else."""
    if isinstance(entry, Mapping):
        entry = entry.get("target")
    if isinstance(entry, int) and not isinstance(entry, bool):
        port = entry
    else:
        match = _PORT.fullmatch(str(entry)) if isinstance(entry, str) else None
        if match is None or match.group(3):
            raise ScenarioError(f"{at}: {entry!r} is not a single container port (a range cannot be the "
                                f"service's port: give port: in the scenario)")
        port = int(match.group(2))
    if not 1 <= port <= 65535:
        raise ScenarioError(f"{at}: port {port} is not in 1..65535")
    return port


def _build(data: Any, at: str, directory: str, variables: Mapping[str, str],
           notes: list[str]) -> ComposeBuild:
    if isinstance(data, str):
        data = {"context": data}
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{at}: must be a context directory or a mapping with {', '.join(BUILD_FIELDS)}")
    for key in data:
        if key in BUILD_IGNORED:
            notes.append(f"build.{key} ignored: {BUILD_IGNORED[key]}")
        elif key not in BUILD_FIELDS:
            raise ScenarioError(f"{at}.{key}: not supported by kafkaproof (it runs `docker build` with "
                                f"{', '.join(BUILD_FIELDS)} only); remove it or give image: instead")
    context = data.get("context", ".")
    if not isinstance(context, str) or not context or "://" in context or context.startswith("git@"):
        raise ScenarioError(f"{at}.context: must be a local directory (relative to the compose file); got {context!r}")
    context = os.path.normpath(os.path.join(directory, context))
    dockerfile = data.get("dockerfile", "Dockerfile")
    if not isinstance(dockerfile, str) or not dockerfile:
        raise ScenarioError(f"{at}.dockerfile: must be a path (relative to the context); got {dockerfile!r}")
    target = data.get("target")
    if target is not None and (not isinstance(target, str) or not target):
        raise ScenarioError(f"{at}.target: must be a stage name; got {target!r}")
    args = _pairs(data.get("args") or {}, f"{at}.args", variables)
    return ComposeBuild(context, os.path.normpath(os.path.join(context, dockerfile)), args, target)


def read_service(document: Any, ref: ComposeRef, variables: Mapping[str, str],
                 read_env_file: Callable[[str], str], where: str) -> ComposeService:
    """Pure (env files come through `read_env_file(absolute path)`, which raises OSError when there is
    none): the definition of `ref.service` in the parsed compose `document`, variables substituted.
    ScenarioError naming `where` (the scenario's field), the file and the compose field otherwise."""
    file_at = f"{where}: {ref.file}"
    services = document.get("services") if isinstance(document, Mapping) else None
    if not isinstance(services, Mapping):
        raise ScenarioError(f"{file_at}: not a compose file: it has no services mapping")
    if ref.service not in services:
        raise ScenarioError(f"{where}.service: {ref.service!r} is not a service of {ref.file}; its services: "
                            f"{', '.join(map(str, services)) or 'none'}")
    at = f"{file_at}: services.{ref.service}"
    data = services[ref.service] or {}
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{at}: must be a mapping; got {data!r}")
    data = _interpolate_all(dict(data), variables, at)
    notes = []
    for key in data:
        if key in IGNORED:
            notes.append(f"{key} ignored: {IGNORED[key]}")
        elif key not in HONOURED and not str(key).startswith("x-"):
            raise ScenarioError(f"{at}.{key}: not supported: kafkaproof runs the service as its own container "
                                f"and cannot honour {key}; supported: {', '.join(HONOURED)} (ignored: "
                                f"{', '.join(IGNORED)})")
    directory = os.path.dirname(ref.file)
    image = data.get("image")
    if image is not None and (not isinstance(image, str) or not image):
        raise ScenarioError(f"{at}.image: must be an image reference; got {image!r}")
    build = _build(data["build"], f"{at}.build", directory, variables, notes) if "build" in data else None
    if image is None and build is None:
        raise ScenarioError(f"{at}: has neither image nor build; kafkaproof needs one of them")
    if image and build:
        notes.append(f"image {image} not tagged: kafkaproof builds its own tag and leaves your images alone")
    env_files = data.get("env_file") or []
    env: dict[str, str] = {}
    for i, entry in enumerate([env_files] if isinstance(env_files, (str, Mapping)) else env_files):
        path, required = (entry.get("path"), entry.get("required", True)) if isinstance(entry, Mapping) else (entry, True)
        if not isinstance(path, str) or not path:
            raise ScenarioError(f"{at}.env_file[{i}]: must be a file path (relative to the compose file)")
        full = os.path.normpath(os.path.join(directory, path))
        try:
            env.update(parse_env_text(read_env_file(full), variables))
        except OSError as e:
            if required:
                raise ScenarioError(f"{at}.env_file[{i}]: cannot read {full}: {e.strerror or e}") from None
    env.update(_pairs(data.get("environment") or {}, f"{at}.environment", variables))
    ports = tuple(container_port(p, f"{at}.{key}[{i}]") for key in ("ports", "expose")
                  for i, p in enumerate(_list(data.get(key), f"{at}.{key}")))
    optional = {}
    for key in ("working_dir", "user"):
        if data.get(key) is not None:
            optional[key] = _scalar(data[key], f"{at}.{key}")
    return ComposeService(ref, image if not build else None, build,
                          _argv(data["command"], f"{at}.command") if data.get("command") is not None else None,
                          _argv(data["entrypoint"], f"{at}.entrypoint") if "entrypoint" in data else None,
                          env, optional.get("working_dir"), optional.get("user"), ports, tuple(notes))


def _list(data: Any, at: str) -> list:
    if data is None:
        return []
    if not isinstance(data, list):
        raise ScenarioError(f"{at}: must be a list; got {data!r}")
    return data


def load_compose_service(ref: ComposeRef, where: str,
                         environ: Mapping[str, str] | None = None) -> ComposeService:
    """Read `ref`'s service from its compose file (variables from `environ`, default this process's
    environment, then the file's `.env`) and check what it names on this host: a build's context directory
    and Dockerfile. ScenarioError naming the field and the file otherwise."""
    path = Path(ref.file)
    if not path.is_file():
        raise ScenarioError(f"{where}.file: {ref.file} is not a file (a relative path starts at the scenario "
                            f"file's directory)")
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ScenarioError(f"{where}.file: {ref.file} cannot be read as YAML: {e}") from None
    dotenv = path.parent / ".env"
    variables = {**(parse_env_text(dotenv.read_text()) if dotenv.is_file() else {}),
                 **(os.environ if environ is None else environ)}
    service = read_service(document, ref, variables, lambda p: Path(p).read_text(), where)
    if service.build is not None:
        at = f"{where}: {ref.file}: services.{ref.service}.build"
        if not os.path.isdir(service.build.context):
            raise ScenarioError(f"{at}.context: {service.build.context} is not a directory")
        if not os.path.isfile(service.build.dockerfile):
            raise ScenarioError(f"{at}.dockerfile: {service.build.dockerfile} is not a file")
    return service


def apply_compose(spec: Any, service: ComposeService, where: str) -> Any:
    """Pure: the scenario's `ServiceSection` with the compose definition under it: the compose command
    unless the scenario gives one, the compose environment under the scenario's `env`, the compose port
    unless the scenario gives one, its entrypoint, working directory and user. ScenarioError when neither
    says which port the service listens on."""
    port = spec.port if spec.port is not None else (service.ports[0] if service.ports else None)
    if port is None:
        raise ScenarioError(f"{where}.port: required: services.{service.ref.service} of {service.ref.file} has "
                            f"no ports: (or expose:) to take the port the service listens on from")
    return dataclasses.replace(spec, argv=spec.argv or service.command or (), env={**service.environment, **spec.env},
                               port=port, entrypoint=service.entrypoint, workdir=service.working_dir,
                               user=service.user)
