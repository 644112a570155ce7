"""Building blocks of a user's application under test (issue 39): identity, outcomes, request templates.

Not wired into scenarios yet: the scenario format does not accept an `application` section.

- `Identity` says how kafkaproof recognises an event in a Kafka record: a JSON pointer into the
  value, a record header, the key, or a regular expression with one group. `Identity.read` never
  raises on a bad record: a record whose identity cannot be read (foreign or malformed) gives None,
  so the caller can count and show it.
- `classify` maps the application's answer to one HTTP request to its outcome: `accepted` (2xx),
  `rejected` (any other final status, or a connection refused: the request never reached it) or
  `indefinite` (a timeout or a connection broken after the request was sent: it may have been taken).
- `RequestTemplate` is one HTTP request per event, with `{id}`, `{seq}` and the run's `{bootstrap}`,
  `{topic}`, `{group}`, `{run_id}` substituted in its URL, header values and body.

Pure: no I/O.
"""
from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ScenarioError

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
            node: Any = json.loads(text)
        except ValueError:
            return None
        for token in self.tokens:
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and _INDEX.fullmatch(token) and int(token) < len(node):
                node = node[int(token)]
            else:
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


def _template(text: Any, field_name: str) -> str:
    if not isinstance(text, str):
        raise ScenarioError(f"{field_name}: must be a string; got {text!r}")
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - set(PLACEHOLDERS))
    if unknown:
        raise ScenarioError(f"{field_name}: unknown placeholder {{{unknown[0]}}}; allowed: "
                            + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    return text


def parse_request(data: Any, where: str) -> RequestTemplate:
    """The request section at `where`: url (required), method (default POST), headers (name: value),
    body (default empty); every template checked for unknown placeholders, ScenarioError naming the field."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: must be a mapping with url, and optionally method, headers, body")
    extra = sorted(set(data) - {"url", "method", "headers", "body"})
    if extra:
        raise ScenarioError(f"{where}.{extra[0]}: not a request field; allowed: url, method, headers, body")
    if "url" not in data:
        raise ScenarioError(f"{where}.url: required, e.g. http://127.0.0.1:8080/signups")
    url = _template(data["url"], f"{where}.url")
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
