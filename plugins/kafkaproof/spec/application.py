"""A user's application under test (issue 39): identity, outcomes, request templates, the scenario's section.

Scenarios accept an `application` section (`parse_application`, checked when a scenario is loaded); runs
do not drive it yet.

- `Identity` says how kafkaproof recognises an event in a Kafka record: a JSON pointer into the
  value, a record header, the key, or a regular expression with one group. `Identity.read` never
  raises on a bad record: a record whose identity cannot be read (foreign or malformed) gives None,
  so the caller can count and show it.
- `classify` maps the application's answer to one HTTP request to its outcome: `accepted` (2xx),
  `rejected` (any other final status, or a connection refused: the request never reached it) or
  `indefinite` (a timeout or a connection broken after the request was sent: it may have been taken).
- `RequestTemplate` is one HTTP request per event, with `{id}`, `{seq}` and the run's `{bootstrap}`,
  `{topic}`, `{group}`, `{run_id}` substituted in its URL, header values and body.
- `parse_application` reads a scenario's `application` section (its services, how to drive them, the
  identity of an event, how to see what was processed) into an `ApplicationSection`;
  `check_application_host` checks that what it names exists on this host (cwd, commands) and that a fixed
  readiness port is free.
- A service is a command (a process on this host) or, with the compose backend, a container on the cluster's
  network (its `port` published on a loopback port): an `image`, or a `compose_service`, a service of the
  user's compose file (spec/compose_service.py reads it); `check_application_backend` refuses a container
  on another backend.

Pure: no I/O, except `check_application_host` (it looks at the filesystem, PATH, a fixed port and reads
a `compose_service`'s compose file).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ScenarioError
from .compose_service import ComposeRef, apply_compose, load_compose_service, parse_compose_ref, scenario_path

IDENTITY_KINDS = ("json_pointer", "header", "key", "regex")
ACCEPTED, REJECTED, INDEFINITE = "accepted", "rejected", "indefinite"
OUTCOMES = (ACCEPTED, REJECTED, INDEFINITE)
# Why a request got no status: refused means it never reached the application (definitely not taken).
FAILURE_OUTCOMES = {"timeout": INDEFINITE, "reset": INDEFINITE, "refused": REJECTED}
METHODS = ("POST", "PUT", "PATCH", "GET", "DELETE")
RUN_PLACEHOLDERS = ("bootstrap", "topic", "group", "run_id")
EVENT_PLACEHOLDERS = ("id", "seq")
PLACEHOLDERS = EVENT_PLACEHOLDERS + RUN_PLACEHOLDERS
# Only `{name}` is a placeholder, so JSON bodies keep their braces as they are: `{"id": "{id}"}`.
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_INDEX = re.compile(r"0|[1-9][0-9]*")
_POINTER_ESCAPE = re.compile(r"~(?![01])")


def _decode(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class Identity:
    """How an event is recognised in a record: `kind` (IDENTITY_KINDS) and its argument (pointer,
    header name or pattern; empty for `key`). Build it with `parse_identity`."""
    kind: str
    argument: str = ""
    tokens: tuple[str, ...] = field(default=(), compare=False, repr=False)
    pattern: re.Pattern | None = field(default=None, compare=False, repr=False)

    def read(self, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None) -> str | None:
        """Pure: the event id in a record, or None when it cannot be read (foreign or malformed record);
        never raises on a bad record. An empty id counts as unreadable."""
        if self.kind == "key":
            found = _decode(key)
        elif self.kind == "header":
            found = next((_decode(v) for name, v in headers or () if name == self.argument), None)
        elif self.kind == "regex":
            text = _decode(value)
            match = self.pattern.search(text) if text is not None and self.pattern else None
            found = match.group(1) if match else None
        else:
            found = self._read_pointer(value)
        return found or None

    def _read_pointer(self, value: bytes | None) -> str | None:
        text = _decode(value)
        if text is None:
            return None
        try:
            node = at_pointer(json.loads(text), self.tokens)
        except ValueError:
            return None
        if isinstance(node, bool) or not isinstance(node, (str, int)):
            return None
        return str(node)


def pointer_tokens(pointer: str) -> tuple[str, ...]:
    """Pure: the reference tokens of an RFC 6901 JSON pointer (`~1` is `/`, `~0` is `~`);
    ValueError when it is not one."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError("a JSON pointer is empty or starts with '/', e.g. /id or /event/id")
    if _POINTER_ESCAPE.search(pointer):
        raise ValueError("'~' must be escaped as ~0 ('/' as ~1)")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


MISSING = object()  # `at_pointer`: nothing there (a JSON null is None)


def at_pointer(node: Any, tokens: tuple[str, ...]) -> Any:
    """Pure: what the reference tokens of a JSON pointer (`pointer_tokens`) lead to in a parsed JSON
    document; MISSING when they lead nowhere (no such member, an index out of range or not decimal)."""
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and _INDEX.fullmatch(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            return MISSING
    return node


def parse_identity(data: Any, where: str) -> Identity:
    """The identity section at `where` (e.g. "app.yaml: application.identity"): a mapping with exactly
    one of json_pointer (string), header (string), key (true), regex (string, one group);
    ScenarioError naming the field and what is allowed otherwise."""
    allowed = ", ".join(IDENTITY_KINDS)
    if not isinstance(data, Mapping) or len(data) != 1:
        raise ScenarioError(f"{where}: must be a mapping with exactly one of {allowed}, "
                            f"e.g. {{json_pointer: /id}}; got {data!r}")
    kind, argument = next(iter(data.items()))
    field_name = f"{where}.{kind}"
    if kind not in IDENTITY_KINDS:
        raise ScenarioError(f"{field_name}: not an identity; allowed: {allowed}")
    if kind == "key":
        if argument is not True:
            raise ScenarioError(f"{field_name}: must be true (the record key is the event id); got {argument!r}")
        return Identity("key")
    if not isinstance(argument, str) or (kind != "json_pointer" and not argument):
        raise ScenarioError(f"{field_name}: must be a non-empty string; got {argument!r}")
    if kind == "header":
        return Identity("header", argument)
    if kind == "json_pointer":
        try:
            return Identity("json_pointer", argument, tokens=pointer_tokens(argument))
        except ValueError as e:
            raise ScenarioError(f"{field_name}: {argument!r} is not an RFC 6901 JSON pointer: {e}") from None
    try:
        pattern = re.compile(argument)
    except re.error as e:
        raise ScenarioError(f"{field_name}: {argument!r} is not a regular expression: {e}") from None
    if pattern.groups != 1:
        raise ScenarioError(f"{field_name}: {argument!r} has {pattern.groups} groups; it needs exactly one, "
                            f"the event id (use (?:...) for the others)")
    return Identity("regex", argument, pattern=pattern)


def failure_kind(error: BaseException) -> str | None:
    """Pure: why a request got no status, one of FAILURE_OUTCOMES' keys; None for an error that is
    not about the connection (a bug, not the application's answer). Looks through urllib's URLError."""
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        error = error.reason
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timeout"
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead,
                          http.client.BadStatusLine)):
        return "reset"
    return None


def classify(status: int | None = None, failure: str | None = None) -> str:
    """Pure: the outcome of one request from its final HTTP status or, without one, its failure kind
    (FAILURE_OUTCOMES: timeout, reset, refused). ValueError for neither, both, or an invalid one."""
    if (status is None) == (failure is None):
        raise ValueError("classify needs a status or a failure kind, not both")
    if status is not None:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"{status!r} is not an HTTP status code")
        return ACCEPTED if 200 <= status <= 299 else REJECTED
    if failure not in FAILURE_OUTCOMES:
        raise ValueError(f"{failure!r} is not a failure kind; allowed: {', '.join(FAILURE_OUTCOMES)}")
    return FAILURE_OUTCOMES[failure]


@dataclass(frozen=True)
class RequestTemplate:
    """One HTTP request per event; build it with `parse_request`. A rendered request is the same
    with every placeholder substituted (`render`)."""
    method: str
    url: str
    headers: dict[str, str]
    body: str

    @property
    def body_bytes(self) -> bytes:
        """The body as sent: UTF-8."""
        return self.body.encode("utf-8")

    def render(self, run: Mapping[str, str], id: str, seq: int) -> RequestTemplate:
        """Pure: the request for event `id` number `seq`; `run` holds bootstrap, topic, group, run_id."""
        values = {**{k: str(run[k]) for k in RUN_PLACEHOLDERS}, "id": id, "seq": str(seq)}

        def fill(text: str) -> str:
            return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
        return RequestTemplate(self.method, fill(self.url), {k: fill(v) for k, v in self.headers.items()},
                               fill(self.body))

    def fill(self, values: Mapping[str, str]) -> RequestTemplate:
        """Pure: the template with the placeholders named in `values` substituted (e.g. `{"port": "8080"}`,
        known once the services run), the others kept for `render`."""
        def sub(text: str) -> str:
            return fill_placeholders(text, values)
        return RequestTemplate(self.method, sub(self.url), {k: sub(v) for k, v in self.headers.items()},
                               sub(self.body))


def event_id(run_id: str, seq: int) -> str:
    """Pure: the id of the run's event number `seq` (the driver's default `{id}`): `<run_id>-<seq>`."""
    return f"{run_id}-{seq}"


def event_seq(run_id: str, id: str) -> int | None:
    """Pure: the inverse of `event_id`: the seq whose `event_id(run_id, seq)` is `id`, None for any other id."""
    prefix = f"{run_id}-"
    digits = id[len(prefix):] if id.startswith(prefix) else ""
    if not (digits.isascii() and digits.isdigit()) or str(int(digits)) != digits:
        return None
    return int(digits)


def fill_placeholders(text: str, values: Mapping[str, str]) -> str:
    """Pure: `text` with each `{name}` found in `values` substituted; other `{...}` kept as written."""
    return PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), text)


def _template(text: Any, field_name: str, allowed: tuple[str, ...] = PLACEHOLDERS,
              pattern: re.Pattern = PLACEHOLDER) -> str:
    if not isinstance(text, str):
        raise ScenarioError(f"{field_name}: must be a string; got {text!r}")
    unknown = sorted({m.group(1) for m in pattern.finditer(text)} - set(allowed))
    if unknown:
        raise ScenarioError(f"{field_name}: unknown placeholder {{{unknown[0]}}}; allowed: "
                            + ", ".join(f"{{{p}}}" for p in allowed))
    return text


def parse_request(data: Any, where: str, url_placeholders: tuple[str, ...] = ()) -> RequestTemplate:
    """The request section at `where`: url (required), method (default POST), headers (name: value),
    body (default empty); every template checked for unknown placeholders, ScenarioError naming the field.
    `url_placeholders`: more placeholders the URL may use (`port`: the application's wiring fills it in
    with `RequestTemplate.fill` before the run renders each request)."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: must be a mapping with url, and optionally method, headers, body")
    extra = sorted(set(data) - {"url", "method", "headers", "body"})
    if extra:
        raise ScenarioError(f"{where}.{extra[0]}: not a request field; allowed: url, method, headers, body")
    if "url" not in data:
        raise ScenarioError(f"{where}.url: required, e.g. http://127.0.0.1:8080/signups")
    url = _template(data["url"], f"{where}.url", PLACEHOLDERS + url_placeholders)
    if not url.startswith(("http://", "https://")):
        raise ScenarioError(f"{where}.url: {url!r} must start with http:// or https://")
    method = str(data.get("method", "POST")).upper()
    if method not in METHODS:
        raise ScenarioError(f"{where}.method: {data['method']!r} is not allowed; allowed: {', '.join(METHODS)}")
    headers = data.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise ScenarioError(f"{where}.headers: must be a mapping of header name to value")
    checked = {str(k): _template(v, f"{where}.headers.{k}") for k, v in headers.items()}
    return RequestTemplate(method, url, checked, _template(data.get("body", ""), f"{where}.body"))


# --- the scenario's `application` section ------------------------------------------------------------
# What a service's command, env and readiness URL may use (run/services.py substitutes them per instance).
SERVICE_PLACEHOLDERS = RUN_PLACEHOLDERS + ("instance", "port")
# A command or env value may carry shell variables (`${HOME}` for `sh -c`): a `{name}` after `$` is not
# checked (run/services.py still substitutes it when it is one of SERVICE_PLACEHOLDERS).
SERVICE_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
MAX_INSTANCES = 8
DEFAULT_READY_TIMEOUT_S = 60.0
DEFAULT_DRIVE_TIMEOUT_S = 5.0
DEFAULT_POLL_S = 1.0
READY_FORMS = ("http", "log")
PROCESSED_SOURCES = ("http", "topic", "postgres")
RECORD_FIELDS = ("id", "partition", "offset", "topic", "time_ms")
# What an HTTP list of processed ids is (run/processed.py's `new_items` reads each): `counts`, a durable
# store (an id listed n times was processed n times); `log`, the processing log in order kept in memory
# (a restarted service lists anew); `distinct`, one entry per id.
PROCESSED_MODES = ("counts", "log", "distinct")
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
APPLICATION_FIELDS = ("services", "drive", "identity", "processed")
SERVICE_FIELDS = ("name", "command", "image", "port", "compose_service", "cwd", "env", "instances", "ready",
                  "ready_timeout_s")
# What an image service may name: a local image reference, or `{example_app}` (the example application's
# image, built locally from the cache's jars: run/app_containers.py).
IMAGE_REF = re.compile(r"[a-z0-9][a-z0-9._/-]{0,199}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?")
EXAMPLE_APP_IMAGE = "{example_app}"
DRIVE_FIELDS = ("service", "request", "rate", "messages", "duration_s", "timeout_s")
PROCESSED_FIELDS = {"http": ("url", "service", "poll_s", "pointer", "records", "mode"), "topic": ("name", "identity"),
                    "postgres": ("dsn", "query")}


@dataclass(frozen=True)
class ServiceSection:
    """One service of the application: its command line (`argv`, placeholders not yet substituted), its
    working directory (absolute), extra environment, instance count and exactly one readiness check.
    With `image` (the compose backend) it is a container of that image: `argv` then overrides the image's
    command (empty: the image's own) and `port` is the port it listens on inside the container; with `compose`
    the same once run/app_containers.py's `plan_containers` applied the compose file's definition."""
    name: str
    argv: tuple[str, ...]
    cwd: str | None
    env: Mapping[str, str]
    instances: int
    ready_url: str | None
    ready_log: str | None
    ready_timeout_s: float
    image: str | None = None
    port: int | None = None
    compose: ComposeRef | None = None  # `compose_service`: spec/compose_service.py applies its definition
    entrypoint: tuple[str, ...] | None = None  # these three from a compose definition only
    workdir: str | None = None
    user: str | None = None

    @property
    def container(self) -> bool:
        """Whether it runs as a container of the compose backend (`image` or `compose_service`)."""
        return self.image is not None or self.compose is not None


@dataclass(frozen=True)
class DriveSection:
    """How kafkaproof sends events: one `request` per event at `rate` per second, open loop, at most
    `messages` and/or for `duration_s`. `service` ("" when none): the service whose instance-0 port the
    URL's `{port}` is."""
    service: str
    request: RequestTemplate
    rate: float
    messages: int | None
    duration_s: float | None
    timeout_s: float


@dataclass(frozen=True)
class RecordPointers:
    """Where the fields of each processed record are when an HTTP source lists objects: RFC 6901 JSON
    pointers into one object. `id` always; `partition` and `offset` together (where in the input topic
    the record was read); `topic` only with them: a record of another topic has no position in the run's;
    `time_ms` the processing time in epoch milliseconds."""
    id: str
    partition: str | None = None
    offset: str | None = None
    topic: str | None = None
    time_ms: str | None = None

    @property
    def positions(self) -> bool:
        """Whether each record says where in the input topic it was read."""
        return self.partition is not None

    def as_dict(self) -> dict[str, str]:
        """The pointers given, for a manifest."""
        return {name: pointer for name, pointer in vars(self).items() if pointer is not None}


@dataclass(frozen=True)
class ProcessedSection:
    """How kafkaproof sees what the consumer side processed: `source` is http, topic or postgres, with its
    fields; `records` (http only): the list holds objects, read by these pointers, not bare ids."""
    source: str
    url: str | None = None
    service: str | None = None
    poll_s: float = DEFAULT_POLL_S
    pointer: str = ""
    records: RecordPointers | None = None
    mode: str = PROCESSED_MODES[0]
    topic: str | None = None
    identity: Identity | None = None
    dsn: str | None = None
    query: str | None = None

    @property
    def read_offsets(self) -> bool:
        """Whether each processed record comes with the input topic's partition and offset."""
        return self.records is not None and self.records.positions


@dataclass(frozen=True)
class ApplicationSection:
    """A scenario's `application` section, checked and with its defaults filled in."""
    services: tuple[ServiceSection, ...]
    drive: DriveSection
    identity: Identity
    processed: ProcessedSection | None

    def service(self, name: str) -> ServiceSection:
        """The service called `name`; KeyError when there is none."""
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)

    def targets(self) -> tuple[str, ...]:
        """Pure: the fault targets the application offers: `app:<service>` and `app:<service>:<i>`."""
        return tuple(t for s in self.services
                     for t in (f"app:{s.name}", *(f"app:{s.name}:{i}" for i in range(s.instances))))


def _mapping(data: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> Mapping:
    """`data` as a mapping with only `allowed` keys and every `required` one; ScenarioError naming the field."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: must be a mapping with {', '.join(allowed)}; got {data!r}")
    extra = sorted(str(k) for k in set(data) - set(allowed))
    if extra:
        raise ScenarioError(f"{where}.{extra[0]}: not a field here; allowed: {', '.join(allowed)}")
    for name in required:
        if name not in data:
            raise ScenarioError(f"{where}.{name}: required")
    return data


def _number(data: Mapping, name: str, where: str, default: float | None = None, integer: bool = False,
            minimum: float = 0, maximum: float | None = None, inclusive: bool = False) -> Any:
    """`data[name]` as a number above `minimum` (or at it, `inclusive`) and at most `maximum`; `default` when absent."""
    value = data.get(name, default)
    if value is None and name not in data:
        return None
    types = (int,) if integer else (int, float)
    valid = isinstance(value, types) and not isinstance(value, bool)
    if not valid or not (value >= minimum if inclusive else value > minimum) or \
            (maximum is not None and value > maximum):
        kind = "an integer" if integer else "a number"
        low = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        bounds = f"{minimum:g}..{maximum:g}" if maximum is not None and inclusive else low
        raise ScenarioError(f"{where}.{name}: must be {kind} {bounds}; got {value!r}")
    return value if integer else float(value)


def _url(text: Any, field_name: str, allowed: tuple[str, ...], pattern: re.Pattern = PLACEHOLDER) -> str:
    url = _template(text, field_name, allowed, pattern)
    if not url.startswith(("http://", "https://")):
        raise ScenarioError(f"{field_name}: {url!r} must start with http:// or https://")
    return url


def _parse_image(data: Mapping, where: str, base_dir: Path | None) -> tuple[str | None, int | None, ComposeRef | None]:
    """The service's `image` or `compose_service` and container `port` (all None for a command service);
    ScenarioError naming the field."""
    kinds = [k for k in ("image", "compose_service") if k in data]
    if not kinds:
        if "command" not in data:
            raise ScenarioError(f"{where}: give command (a process on this host) or, with cluster.backend: compose, "
                                f"image (a container) or compose_service (a service of your compose file)")
        if "port" in data:
            raise ScenarioError(f"{where}.port: only a container service takes it (a command service gets a free "
                                f"{{port}} of its own)")
        return None, None, None
    if len(kinds) > 1:
        raise ScenarioError(f"{where}.compose_service: give image or compose_service, not both")
    if "cwd" in data:
        raise ScenarioError(f"{where}.cwd: a container service runs in its container's working directory; remove cwd")
    image = data.get("image")
    compose = parse_compose_ref(data["compose_service"], f"{where}.compose_service", base_dir) \
        if kinds[0] == "compose_service" else None
    if compose is None:
        if not isinstance(image, str) or not (image == EXAMPLE_APP_IMAGE or IMAGE_REF.fullmatch(image)):
            raise ScenarioError(f"{where}.image: {image!r} is not an image reference; allowed: a local image such "
                                f"as my-team/signup:1.4, or {EXAMPLE_APP_IMAGE} (the example application's image)")
        if "port" not in data:
            raise ScenarioError(f"{where}.port: required with image: the port the service listens on inside its "
                                f"container (published on a loopback port of this host, the {{port}} of URLs)")
    port = data.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise ScenarioError(f"{where}.port: must be an integer 1..65535; got {port!r}")
    return image, port, compose


def _parse_service(data: Any, where: str, base_dir: Path | None) -> ServiceSection:
    data = _mapping(data, where, SERVICE_FIELDS, ("name", "ready"))
    name = data["name"]
    if not isinstance(name, str) or not SERVICE_NAME.fullmatch(name):
        raise ScenarioError(f"{where}.name: {name!r} is not a service name; allowed: lowercase letters, digits "
                            f"and '-', starting with a letter or digit, at most 63 characters")
    image, port, compose = _parse_image(data, where, base_dir)
    command = data.get("command", [])
    if not isinstance(command, list) or not (command or image or compose) or not all(isinstance(a, str) and a for a in command):
        raise ScenarioError(f"{where}.command: must be a non-empty list of non-empty strings (quote numbers), "
                            f"e.g. [java, -jar, app.jar]; got {command!r}")
    argv = tuple(_template(a, f"{where}.command[{i}]", SERVICE_PLACEHOLDERS, SERVICE_PLACEHOLDER)
                 for i, a in enumerate(command))
    jar = next((i for i, a in enumerate(argv) if "{example_app:" in a), None)
    if (image or compose) and jar is not None:
        raise ScenarioError(f"{where}.command[{jar}]: {{example_app:<service>}} is a jar on this host; in the "
                            f"container of image {EXAMPLE_APP_IMAGE} the jars are /app/<service>.jar")
    cwd = data.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise ScenarioError(f"{where}.cwd: must be a directory path (relative to the scenario file); got {cwd!r}")
    env = data.get("env") or {}
    if not isinstance(env, Mapping):
        raise ScenarioError(f"{where}.env: must be a mapping of variable name to value")
    checked_env: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key:
            raise ScenarioError(f"{where}.env: {key!r} is not an environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ScenarioError(f"{where}.env.{key}: must be a string or a number (quote true/false); got {value!r}")
        checked_env[key] = _template(str(value), f"{where}.env.{key}", SERVICE_PLACEHOLDERS, SERVICE_PLACEHOLDER)
    instances = _number(data, "instances", where, 1, integer=True, minimum=1, maximum=MAX_INSTANCES, inclusive=True)
    ready = data["ready"]
    if not isinstance(ready, Mapping) or len(ready) != 1 or next(iter(ready)) not in READY_FORMS:
        raise ScenarioError(f"{where}.ready: must be a mapping with exactly one of {', '.join(READY_FORMS)}, e.g. "
                            f"{{http: \"http://127.0.0.1:{{port}}/actuator/health\"}} or {{log: \"Started .* in\"}}; "
                            f"got {ready!r}")
    ready_url = ready_log = None
    if "http" in ready:
        ready_url = _url(ready["http"], f"{where}.ready.http", SERVICE_PLACEHOLDERS)
    else:
        ready_log = ready["log"]
        if not isinstance(ready_log, str) or not ready_log:
            raise ScenarioError(f"{where}.ready.log: must be a non-empty regular expression; got {ready_log!r}")
        try:
            re.compile(ready_log)
        except re.error as e:
            raise ScenarioError(f"{where}.ready.log: {ready_log!r} is not a regular expression: {e}") from None
    return ServiceSection(name, argv, scenario_path(cwd, base_dir) if cwd is not None else None, checked_env, instances,
                          ready_url, ready_log, _number(data, "ready_timeout_s", where, DEFAULT_READY_TIMEOUT_S),
                          image, port, compose)


def fixed_port(url: str | None) -> int | None:
    """Pure: the port a URL names literally (`http://127.0.0.1:8080/...`), None when it names none or a
    placeholder (`{port}`: kafkaproof picks a free one per instance)."""
    if url is None:
        return None
    netloc = urllib.parse.urlsplit(url).netloc
    if PLACEHOLDER.search(netloc):
        return None
    try:
        return urllib.parse.urlsplit(url).port
    except ValueError:
        return None


def _check_fixed_ports(services: tuple[ServiceSection, ...], where: str) -> None:
    """Pure: a literal port in a process service's readiness URL is bound by one instance of one service
    only; ScenarioError naming the field otherwise (containers publish a free host port each)."""
    owners: dict[int, int] = {}
    for i, service in enumerate(services):
        port = fixed_port(service.ready_url) if not service.container else None
        if port is None:
            continue
        at = f"{where}.services[{i}].ready.http"
        if service.instances > 1:
            raise ScenarioError(f"{at}: the fixed port {port} with instances: {service.instances}: every instance "
                                f"would bind the same port; write {{port}} (each instance gets a free one)")
        if port in owners:
            raise ScenarioError(f"{at}: port {port} is also services[{owners[port]}]'s fixed port; two services "
                                f"cannot both listen on it: write {{port}} (each gets a free one)")
        owners[port] = i


def _service_ref(data: Mapping, where: str, names: tuple[str, ...]) -> str:
    """The service `data["service"]` names ("" when none); ScenarioError when it is not declared."""
    service = data.get("service", "")
    if service != "" and service not in names:
        raise ScenarioError(f"{where}.service: {service!r} is not a service of application.services; "
                            f"allowed: {', '.join(names)}")
    return service


def _refuse_port_without_service(url: Any, where: str, service: str, service_field: str) -> None:
    if not service and isinstance(url, str) and any(m.group(1) == "port" for m in PLACEHOLDER.finditer(url)):
        field_name = service_field.split(": ", 1)[-1]  # without the file `where` starts with
        raise ScenarioError(f"{where}: {{port}} needs {field_name}, the service whose instance-0 port it is; "
                            f"without it, write the port")


def _parse_drive(data: Any, where: str, names: tuple[str, ...]) -> DriveSection:
    data = _mapping(data, where, DRIVE_FIELDS, ("request", "rate"))
    service = _service_ref(data, where, names)
    request = data["request"]
    if isinstance(request, Mapping):
        _refuse_port_without_service(request.get("url"), f"{where}.request.url", service, f"{where}.service")
    template = parse_request(request, f"{where}.request", ("port",) if service else ())
    if "messages" not in data and "duration_s" not in data:
        raise ScenarioError(f"{where}: give messages or duration_s (or both): the drive is always bounded")
    return DriveSection(service, template, _number(data, "rate", where),
                        _number(data, "messages", where, integer=True, minimum=1, inclusive=True),
                        _number(data, "duration_s", where),
                        _number(data, "timeout_s", where, DEFAULT_DRIVE_TIMEOUT_S))


def _parse_records(data: Any, where: str) -> RecordPointers:
    """`processed.http.records` at `where`: RecordPointers; ScenarioError naming the field otherwise."""
    data = _mapping(data, where, RECORD_FIELDS, ("id",))
    for name, pointer in data.items():
        if not isinstance(pointer, str) or not pointer:
            raise ScenarioError(f"{where}.{name}: must be a JSON pointer into each listed object, e.g. /{name}; "
                                f"got {pointer!r}")
        try:
            pointer_tokens(pointer)
        except ValueError as e:
            raise ScenarioError(f"{where}.{name}: {pointer!r} is not an RFC 6901 JSON pointer: {e}") from None
    if ("partition" in data) != ("offset" in data):
        given, missing = ("partition", "offset") if "partition" in data else ("offset", "partition")
        raise ScenarioError(f"{where}.{missing}: required with {given}: a record's position in the input topic "
                            f"is its partition and offset")
    if "topic" in data and "partition" not in data:
        raise ScenarioError(f"{where}.topic: only with partition and offset (it says which topic they are "
                            f"positions of)")
    return RecordPointers(**{str(k): v for k, v in data.items()})


def _parse_processed(data: Any, where: str, names: tuple[str, ...], identity: Identity) -> ProcessedSection:
    if not isinstance(data, Mapping) or len(data) != 1 or next(iter(data)) not in PROCESSED_SOURCES:
        raise ScenarioError(f"{where}: must be a mapping with exactly one of {', '.join(PROCESSED_SOURCES)}; "
                            f"got {data!r}")
    source, section = next(iter(data.items()))
    at = f"{where}.{source}"
    if source == "http":
        section = _mapping(section, at, PROCESSED_FIELDS["http"], ("url",))
        service = _service_ref(section, at, names)
        _refuse_port_without_service(section["url"], f"{at}.url", service, f"{at}.service")
        url = _url(section["url"], f"{at}.url", RUN_PLACEHOLDERS + (("port",) if service else ()))
        pointer = section.get("pointer", "")
        try:
            pointer_tokens(pointer if isinstance(pointer, str) else None)
        except (ValueError, AttributeError, TypeError):
            raise ScenarioError(f"{at}.pointer: {pointer!r} is not an RFC 6901 JSON pointer (\"\" is the whole "
                                f"answer, /ids a field)") from None
        records = _parse_records(section["records"], f"{at}.records") if "records" in section else None
        mode = section.get("mode", PROCESSED_MODES[0])
        if mode not in PROCESSED_MODES:
            raise ScenarioError(f"{at}.mode: {mode!r} is not a mode; allowed: {', '.join(PROCESSED_MODES)} (log: "
                                f"the processing log in order, kept in memory, listed anew after a restart)")
        return ProcessedSection("http", url=url, service=service or None,
                                poll_s=_number(section, "poll_s", at, DEFAULT_POLL_S), pointer=pointer,
                                records=records, mode=mode)
    if source == "topic":
        section = _mapping(section, at, PROCESSED_FIELDS["topic"], ("name",))
        name = section["name"]
        if not isinstance(name, str) or not TOPIC_NAME.fullmatch(name):
            raise ScenarioError(f"{at}.name: {name!r} is not a topic name; allowed: 1 to 249 of letters, digits, "
                                f"'.', '_', '-'")
        own = parse_identity(section["identity"], f"{at}.identity") if "identity" in section else identity
        return ProcessedSection("topic", topic=name, identity=own)
    section = _mapping(section, at, PROCESSED_FIELDS["postgres"], ("dsn", "query"))
    for key in ("dsn", "query"):
        if not isinstance(section[key], str) or not section[key].strip():
            raise ScenarioError(f"{at}.{key}: must be a non-empty string; got {section[key]!r}")
    return ProcessedSection("postgres", dsn=section["dsn"], query=section["query"])


def parse_application(data: Any, where: str, base_dir: Path | None) -> ApplicationSection:
    """The `application` section at `where` (e.g. "s.yaml: application"), its defaults filled in; relative
    `cwd`s resolved against `base_dir`, the scenario file's directory (the current one when None).
    Pure (no filesystem look-up: `check_application_host` does that); ScenarioError naming the field and
    what is allowed."""
    data = _mapping(data, where, APPLICATION_FIELDS, ("services", "drive", "identity"))
    listed = data["services"]
    if not isinstance(listed, list) or not listed:
        raise ScenarioError(f"{where}.services: must be a non-empty list of services; got {listed!r}")
    services = tuple(_parse_service(s, f"{where}.services[{i}]", base_dir) for i, s in enumerate(listed))
    names = tuple(s.name for s in services)
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ScenarioError(f"{where}.services[{i}].name: {name!r} is already the name of "
                                f"services[{names.index(name)}]; service names must be unique")
    _check_fixed_ports(services, where)
    kinds = {s.container for s in services}
    if len(kinds) > 1:
        first = next(i for i, s in enumerate(services) if s.container)
        field_name = "image" if services[first].image is not None else "compose_service"
        raise ScenarioError(f"{where}.services[{first}].{field_name}: mixing container and command services is not "
                            f"supported; run every service as a container (image:, compose_service:) or a process")
    identity = parse_identity(data["identity"], f"{where}.identity")
    processed = data.get("processed")
    return ApplicationSection(services, _parse_drive(data["drive"], f"{where}.drive", names), identity,
                              None if processed is None else
                              _parse_processed(processed, f"{where}.processed", names, identity))


def check_application_backend(data: Mapping[str, Any], backend: str, proxy: bool, where: str) -> None:
    """Pure, on the raw `application` section (schema-checked): container services need the compose backend
    without the fault proxy (their clients reach the brokers inside the cluster's network); ScenarioError
    naming the field and what is allowed otherwise."""
    for i, service in enumerate(data.get("services") or ()):
        kind = next((k for k in ("image", "compose_service") if isinstance(service, Mapping) and k in service), None)
        if kind is None:
            continue
        at = f"{where}.services[{i}].{kind}"
        if backend != "compose":
            raise ScenarioError(f"{at}: a container service needs cluster.backend: compose (the {backend} backend runs "
                                f"services as processes on this host: give command instead)")
        if proxy:
            raise ScenarioError(f"{at}: containers reach the brokers inside the cluster's network, which the fault "
                                f"proxy (cluster.proxy) does not front; remove cluster.proxy or run the service "
                                f"as a command")


def check_application_host(section: ApplicationSection, where: str) -> None:
    """What the services need on this host: a compose service's file, service and build context readable and
    supported (spec/compose_service.py); each `cwd` an existing directory, each command an executable
    (command[0] with a '/' relative to the cwd, else found on PATH, the service's own `env` PATH if it sets
    one); a command[0] with a placeholder is left to the run. ScenarioError naming the field otherwise."""
    for i, service in enumerate(section.services):
        at = f"{where}.services[{i}]"
        if service.compose is not None:  # the compose file, its service, env files and build context
            apply_compose(service, load_compose_service(service.compose, f"{at}.compose_service"), at)
        if service.container:
            continue  # its command runs in the container: the engine checks the image (run/app_containers.py)
        if service.cwd is not None and not os.path.isdir(service.cwd):
            raise ScenarioError(f"{at}.cwd: {service.cwd} is not a directory (a relative cwd starts at the "
                                f"scenario file's directory)")
        program = service.argv[0]
        if PLACEHOLDER.search(program):
            continue
        if "/" in program:
            path = os.path.join(service.cwd or os.getcwd(), os.path.expanduser(program))
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ScenarioError(f"{at}.command[0]: {program!r} is not an executable file ({path})")
        elif shutil.which(program, path=service.env.get("PATH")) is None:
            raise ScenarioError(f"{at}.command[0]: {program!r} is not found on PATH; give a command on PATH or a "
                                f"path to it (relative to cwd)")
        port = fixed_port(service.ready_url)
        host = urllib.parse.urlsplit(service.ready_url).hostname if port is not None else None
        if host in LOOPBACK_HOSTS and _listening(host, port):
            raise ScenarioError(f"{at}.ready.http: port {port} on {host} is already in use (something answers there "
                                f"before the service starts: another copy of it, or another program); stop it, or "
                                f"write {{port}} so that kafkaproof picks a free port")


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


_STR = {"type": "string"}
_POSITIVE = {"type": "number", "exclusiveMinimum": 0}
# The section's part of the scenario JSON Schema (spec.scenario.SCHEMA, scenarios/scenario.schema.json): its
# fields and types for editors and the first check; `parse_application` checks the rest (names, placeholders,
# references between fields) with messages naming the field.
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["services", "drive", "identity"],
    "description": "your own services under test, driven by HTTP (docs/application.md)",
    "properties": {
        "services": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "ready"],
            "properties": {
                "name": {"type": "string", "pattern": f"^{SERVICE_NAME.pattern}$"},
                "command": {"type": "array", "minItems": 1, "items": _STR,
                            "description": "argv (with image: the container's command); {port}, {instance}, "
                                           "{bootstrap}, {topic}, {group}, {run_id}"},
                "image": {"type": "string", "description": "compose backend: a local image, or {example_app}"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                         "description": "with image or compose_service: the port it listens on in its container"},
                "compose_service": {"type": "object", "additionalProperties": False, "required": ["file", "service"],
                                    "properties": {"file": _STR, "service": _STR}, "description": "compose backend: "
                                    "a service of your compose file (relative to the scenario file)"},
                "cwd": {"type": "string", "description": "relative to the scenario file's directory"},
                "env": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
                "instances": {"type": "integer", "minimum": 1, "maximum": MAX_INSTANCES},
                "ready": {"type": "object", "minProperties": 1, "maxProperties": 1,
                          "properties": {"http": _STR, "log": _STR}, "additionalProperties": False,
                          "description": "http: a URL answering 2xx; log: a regex a line of its output matches"},
                "ready_timeout_s": _POSITIVE}}},
        "drive": {"type": "object", "additionalProperties": False, "required": ["request", "rate"],
                  "description": "one HTTP request per event, open loop",
                  "properties": {"service": {"type": "string", "description": "whose instance-0 {port} the URL uses"},
                                 "request": {"type": "object", "description": "url, method, headers, body"},
                                 "rate": _POSITIVE, "messages": {"type": "integer", "minimum": 1},
                                 "duration_s": _POSITIVE, "timeout_s": _POSITIVE}},
        "identity": {"type": "object", "description": "how an event is recognised in a record: one of "
                                                      + ", ".join(IDENTITY_KINDS)},
        "processed": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                      "description": "what the consumer side processed: one of " + ", ".join(PROCESSED_SOURCES),
                      "properties": {k: {"type": "object"} for k in PROCESSED_SOURCES}},
    },
}
