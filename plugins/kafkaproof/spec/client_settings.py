"""A team's client settings, read from the files their applications use: one explicit type for the audit.

Three sources, one result (`ClientSettings`):

- a Java client properties file (kafka-clients names, `name=value` lines),
- a librdkafka properties file (librdkafka names, the same format),
- a Spring Boot `application.yml` / `application.properties`: `spring.kafka.*` mapped to Kafka client
  property names exactly as Spring Boot's `KafkaProperties` (`buildProducerProperties`,
  `buildConsumerProperties`) maps them, with Spring's relaxed names (kebab-case, camelCase, snake_case),
  nested YAML, bracketed map keys, durations (`5s`, `PT5S`, plain numbers: milliseconds) and data sizes
  (`16KB`, plain numbers: bytes). Of profile documents (`---` in YAML, `#---` in properties) only the
  default profile's are read; `notes` says which were skipped.

The result splits what a file says into the bootstrap servers, the *connection config* (`security.*`,
`sasl.*`, `ssl.*`: how to reach the cluster, as spec.connection defines it) and the producer and consumer
properties (how the clients behave: what `producers.config` / `consumers.config` of a scenario take).
Keys that map to no client property are listed in `unknown` with their line and why, never dropped
silently. Whether a properties file's names are the client's own is the client's to say
(run.client_config checks them); a Spring key's mapping is checked here.

Pure functions: no I/O except `read_client_settings` (reads the one file it is given).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import KafkaproofError
from .clients import producer_settings
from .connection import BOOTSTRAP_KEYS, ConnectionConfigError, connection_text, property_lines, redacted

FORMATS = ("java", "librdkafka", "spring")
ROLES = ("producer", "consumer", "both")
CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.")


class ClientSettingsError(KafkaproofError, ValueError):
    """A client settings file kafkaproof cannot read; the message names the file, the line or key and what is allowed."""


@dataclass(frozen=True)
class UnknownKey:
    """A key of a settings file that maps to no producer or consumer property, and why."""

    key: str
    line: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "line": self.line, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "UnknownKey":
        return cls(key=str(data["key"]), line=data.get("line"), reason=str(data["reason"]))


@dataclass(frozen=True)
class ClientSettings:
    """What a team's producers and consumers run with, in the client's own property names.

    `client` is whose names `producer` / `consumer` use (`java` for Java and Spring files, `librdkafka`);
    `connection` holds the security settings (both roles); `transactions` is Spring's
    `transaction-id-prefix` (its producers are transactional, each with an id of its own).
    """

    source: str
    format: str
    client: str
    bootstrap: str | None
    connection: dict[str, Any]
    producer: dict[str, Any]
    consumer: dict[str, Any]
    unknown: tuple[UnknownKey, ...] = ()
    notes: tuple[str, ...] = ()
    transactions: bool = False

    def producer_summary(self) -> dict[str, Any]:
        """acks (-1/0/1) and idempotence as the producer runs with them (spec.clients' reading, defaults included)."""
        s = producer_settings({"client": self.client, "config": self.producer, "transactions": self.transactions}, 0)
        return {"acks": s["acks"], "idempotence": s["idempotence"], "transactional": s["transactional"]}

    def to_dict(self, redact: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; with `redact`, credentials as `***` (for printing and reports)."""
        hide = redacted if redact else dict
        return {"source": self.source, "format": self.format, "client": self.client, "bootstrap": self.bootstrap,
                "connection": hide(self.connection), "producer": hide(self.producer),
                "consumer": hide(self.consumer), "unknown": [u.to_dict() for u in self.unknown],
                "notes": list(self.notes), "transactions": self.transactions}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ClientSettings":
        return cls(source=data["source"], format=data["format"], client=data["client"],
                   bootstrap=data.get("bootstrap"), connection=dict(data.get("connection") or {}),
                   producer=dict(data.get("producer") or {}), consumer=dict(data.get("consumer") or {}),
                   unknown=tuple(UnknownKey.from_dict(u) for u in data.get("unknown") or ()),
                   notes=tuple(data.get("notes") or ()), transactions=bool(data.get("transactions")))


def is_connection_key(name: str) -> bool:
    """Pure: whether a client property says how to reach the cluster (security, SASL, TLS), not how a client behaves."""
    return name.startswith(CONNECTION_PREFIXES)


def _split(config: Mapping[str, Any]) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(bootstrap, connection, behaviour) of one role's properties."""
    bootstrap = next((str(config[k]) for k in BOOTSTRAP_KEYS if config.get(k) not in (None, "")), None)
    connection = {k: v for k, v in config.items() if is_connection_key(k)}
    behaviour = {k: v for k, v in config.items() if k not in BOOTSTRAP_KEYS and not is_connection_key(k)}
    return bootstrap, connection, behaviour


def _combine(source: str, fmt: str, client: str, producer: Mapping[str, Any] | None,
             consumer: Mapping[str, Any] | None, **extra: Any) -> ClientSettings:
    """One ClientSettings from each role's full properties (None: the file says nothing of that role)."""
    p_boot, p_conn, p_props = _split(producer or {})
    c_boot, c_conn, c_props = _split(consumer or {})
    notes = list(extra.pop("notes", ()))
    if producer is not None and consumer is not None:
        for what, a, b in (("bootstrap servers", p_boot, c_boot), ("connection settings", p_conn, c_conn)):
            if a != b:
                notes.append(f"producer and consumer differ in their {what}; the producer's are used to connect")
    return ClientSettings(source=source, format=fmt, client=client, bootstrap=p_boot or c_boot,
                          connection=p_conn if producer is not None else c_conn,
                          producer=p_props, consumer=c_props, notes=tuple(notes), **extra)


# --- Java and librdkafka properties files ------------------------------------------------

def parse_client_properties(text: str, source: str, client: str, role: str) -> ClientSettings:
    """Pure: a Java (`client="java"`) or librdkafka properties file; its properties are the producer's,
    the consumer's or both (`role`). Unknown names are the client's to find (run.client_config)."""
    if client not in ("java", "librdkafka"):
        raise ClientSettingsError(f"{source}: client {client!r} is not allowed; allowed: java, librdkafka")
    if role not in ROLES:
        raise ClientSettingsError(f"{source}: role {role!r} is not allowed; allowed: {', '.join(ROLES)}")
    try:
        config = {name: value for _, name, value in property_lines(text, source)}
    except ConnectionConfigError as e:
        raise ClientSettingsError(str(e)) from None
    return _combine(source, client, client,
                    config if role in ("producer", "both") else None,
                    config if role in ("consumer", "both") else None)


# --- Spring Boot ---------------------------------------------------------------------------

# Spring Boot's KafkaProperties (spring-boot-kafka, org.springframework.boot.kafka.autoconfigure):
# relaxed field name -> (client property, value kind). Kinds: str, int, bool, duration (ms), size (bytes).
SPRING_COMMON = {"bootstrap-servers": ("bootstrap.servers", "list"), "client-id": ("client.id", "str")}
SPRING_SSL = {"key-password": "ssl.key.password", "key-store-certificate-chain": "ssl.keystore.certificate.chain",
              "key-store-key": "ssl.keystore.key", "key-store-location": "ssl.keystore.location",
              "key-store-password": "ssl.keystore.password", "key-store-type": "ssl.keystore.type",
              "trust-store-certificates": "ssl.truststore.certificates",
              "trust-store-location": "ssl.truststore.location",
              "trust-store-password": "ssl.truststore.password", "trust-store-type": "ssl.truststore.type",
              "protocol": "ssl.protocol"}
SPRING_PRODUCER = {**SPRING_COMMON, "acks": ("acks", "str"), "batch-size": ("batch.size", "size"),
                   "buffer-memory": ("buffer.memory", "size"), "compression-type": ("compression.type", "str"),
                   "key-serializer": ("key.serializer", "str"), "value-serializer": ("value.serializer", "str"),
                   "retries": ("retries", "int")}
SPRING_CONSUMER = {**SPRING_COMMON, "auto-commit-interval": ("auto.commit.interval.ms", "duration"),
                   "auto-offset-reset": ("auto.offset.reset", "str"),
                   "enable-auto-commit": ("enable.auto.commit", "bool"),
                   "fetch-max-wait": ("fetch.max.wait.ms", "duration"), "fetch-min-size": ("fetch.min.bytes", "size"),
                   "group-id": ("group.id", "str"), "heartbeat-interval": ("heartbeat.interval.ms", "duration"),
                   "isolation-level": ("isolation.level", "isolation"),
                   "key-deserializer": ("key.deserializer", "str"),
                   "value-deserializer": ("value.deserializer", "str"),
                   "max-poll-records": ("max.poll.records", "int"),
                   "max-poll-interval": ("max.poll.interval.ms", "duration")}
# Spring Boot always passes isolation.level: its default is read_uncommitted (the Java client's too).
SPRING_CONSUMER_DEFAULTS = {"isolation.level": "read_uncommitted"}
# spring.kafka groups that configure Spring, not a producer's or consumer's client properties.
SPRING_OTHER_GROUPS = {
    "admin": "the KafkaAdmin bean's settings, not a producer's or consumer's",
    "streams": "Kafka Streams settings: the audit reads producers and consumers",
    "listener": "a Spring listener container setting (how Spring commits and polls), not a client property",
    "template": "a KafkaTemplate setting, not a client property",
    "jaas": "a JAAS login module for Kerberos: give the connection in --client-config",
    "retry": "Spring's retry topics, not a client property",
}
SPRING_PROFILE_KEYS = ("spring.config.activate.on-profile", "spring.profiles")
SPRING_PREFIX = "spring.kafka."

_SEGMENT = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
_SIMPLE = re.compile(r"^([+-]?\d+)([a-zA-Z]{0,2})$")
_ISO = re.compile(r"^([+-]?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)
DURATION_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3, "tb": 1024 ** 4}


def relaxed(name: str) -> str:
    """Pure: Spring's canonical (kebab-case) form of one key segment: `bootstrapServers`,
    `bootstrap_servers` and `bootstrap-servers` are the same key."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name).replace("_", "-").lower()


def key_segments(key: str) -> list[tuple[str, bool]]:
    """Pure: the segments of a Spring key as (text, bracketed): `a.b[c.d]` -> [(a, F), (b, F), (c.d, T)]."""
    return [(m.group(1), True) if m.group(1) is not None else (m.group(2), False) for m in _SEGMENT.finditer(key)]


def canonical_key(key: str) -> str:
    """Pure: a key with its plain segments in relaxed form up to a `properties` map; after it, map keys keep
    their case and, outside brackets, lose what Spring removes from them (all but letters, digits and `-`);
    bracketed segments are kept as written (`properties[linger.ms]`). The same form for both file formats."""
    out, in_map = [], False
    for text, bracketed in key_segments(key):
        if bracketed:
            out.append(f"[{text}]")
        elif in_map:
            out.append(re.sub(r"[^A-Za-z0-9-]", "", text))
        else:
            out.append(relaxed(text))
            in_map = out[-1] == "properties"
    return ".".join(out)


def parse_duration_ms(text: str) -> int:
    """Pure: a Spring Boot Duration in milliseconds: `500` (ms), `500ms`, `5s`, `1m`, `2h`, `1d`, `PT5S`; ValueError."""
    value = text.strip()
    m = _SIMPLE.match(value)
    if m:
        unit = m.group(2).lower() or "ms"
        if unit not in DURATION_UNITS_MS:
            raise ValueError(f"unit {m.group(2)!r}")
        return int(int(m.group(1)) * DURATION_UNITS_MS[unit])
    m = _ISO.match(value)
    if m and any(m.group(i) for i in range(2, 6)):
        days, hours, minutes, seconds = (float(m.group(i) or 0) for i in range(2, 6))
        ms = int(round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000))
        return -ms if m.group(1) == "-" else ms
    raise ValueError("not a duration")


def parse_data_size(text: str) -> int:
    """Pure: a Spring Boot DataSize in bytes: `16384` (bytes), `16KB`, `1MB` (binary multiples); ValueError."""
    m = _SIMPLE.match(text.strip())
    if not m or (m.group(2).lower() or "b") not in SIZE_UNITS:
        raise ValueError("not a data size")
    return int(m.group(1)) * SIZE_UNITS[m.group(2).lower() or "b"]


ALLOWED_VALUES = {"int": "a whole number", "bool": "true or false",
                  "duration": "a number of milliseconds, or 500ms, 5s, 1m, 2h, 1d, PT5S",
                  "size": "a number of bytes, or 512B, 16KB, 1MB, 1GB",
                  "isolation": "read_committed or read_uncommitted (any case, - or _)"}


def _convert(kind: str, raw: str) -> Any:
    """Pure: a Spring value as the client property KafkaProperties passes; ValueError when it is not one."""
    if kind in ("str", "list"):
        return raw
    if kind == "int":
        return int(raw.strip())
    if kind == "bool":
        if raw.strip().lower() not in ("true", "false"):
            raise ValueError
        return raw.strip().lower() == "true"
    if kind == "duration":
        return parse_duration_ms(raw)
    if kind == "size":
        return parse_data_size(raw)
    level = re.sub(r"[-_]", "", raw.strip()).lower()
    if level not in ("readcommitted", "readuncommitted"):
        raise ValueError
    return "read_committed" if level == "readcommitted" else "read_uncommitted"


def _flatten_yaml(node, prefix: str, source: str) -> Iterator[tuple[int, str, str]]:
    """(line, dotted key, raw value) of every scalar of a composed YAML node; lists become comma lists."""
    import yaml
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ClientSettingsError(f"{source}, line {key_node.start_mark.line + 1}: a key must be text")
            key = key_node.value
            yield from _flatten_yaml(value_node, f"{prefix}.{key}" if prefix else key, source)
    elif isinstance(node, yaml.SequenceNode):
        items = []
        for item in node.value:
            if not isinstance(item, yaml.ScalarNode):
                raise ClientSettingsError(f"{source}, line {item.start_mark.line + 1}: {prefix}: expected a list "
                                          f"of values (e.g. host:port entries)")
            items.append(item.value)
        yield node.start_mark.line + 1, prefix, ",".join(items)
    elif node.tag != "tag:yaml.org,2002:null":
        yield node.start_mark.line + 1, prefix, node.value


def spring_documents(text: str, source: str) -> list[list[tuple[int, str, str]]]:
    """Pure: the documents of a Spring file as (line, canonical key, raw value) entries: YAML documents
    (`---`), or properties documents (`#---` / `!---` lines) when `source` is not a .yml/.yaml file."""
    if Path(source).suffix.lower() in (".yml", ".yaml"):
        import yaml
        try:
            nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f", line {mark.line + 1}" if mark else ""
            raise ClientSettingsError(f"{source}{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
        docs = []
        for node in nodes:
            if node is not None and not isinstance(node, yaml.MappingNode):
                raise ClientSettingsError(f"{source}, line {node.start_mark.line + 1}: a Spring configuration "
                                          f"document must be a mapping of keys (spring: kafka: ...)")
            docs.append([] if node is None else [(n, canonical_key(k), v) for n, k, v in _flatten_yaml(node, "", source)])
        return docs
    docs, start, lines = [], 0, text.splitlines()
    bounds = [i for i, line in enumerate(lines) if line.strip() in ("#---", "!---")] + [len(lines)]
    for end in bounds:
        chunk = "\n" * start + "\n".join(lines[start:end])  # keeps the file's line numbers
        try:
            docs.append([(n, canonical_key(k), v) for n, k, v in property_lines(chunk, source)])
        except ConnectionConfigError as e:
            raise ClientSettingsError(str(e)) from None
        start = end + 1
    return docs


def default_profile(docs: list[list[tuple[int, str, str]]]) -> tuple[list[tuple[int, str, str]], list[str]]:
    """Pure: the entries of every document without a profile condition, in order (later ones win), and notes
    naming the profile documents left out and any `spring.profiles.active` not applied."""
    entries, skipped, notes = [], [], []
    for doc in docs:
        condition = next((v for _, k, v in doc if k in SPRING_PROFILE_KEYS), None)
        if condition is None:
            entries += doc
        else:
            skipped.append(condition)
    if skipped:
        notes.append(f"the default profile was read; documents for profiles {', '.join(skipped)} were not applied")
    active = [v for _, k, v in entries if k == "spring.profiles.active"]
    if active:
        notes.append(f"spring.profiles.active={active[-1]} is set, but only the default profile was read")
    return entries, notes


def _spring_role_entry(role: str, rest: list[tuple[str, bool]], raw: str, key: str, line: int, source: str,
                       ) -> tuple[str | None, Any, str | None]:
    """(client property, value, reason it is unknown) of one key under spring.kafka[.producer|.consumer]."""
    fields = {"producer": SPRING_PRODUCER, "consumer": SPRING_CONSUMER, "common": SPRING_COMMON}[role]
    head = rest[0][0] if rest else ""
    if head == "properties" and len(rest) > 1:
        return ".".join(text for text, _ in rest[1:]), raw, None
    if head == "ssl" and len(rest) == 2:
        if rest[1][0] in SPRING_SSL:
            return SPRING_SSL[rest[1][0]], raw, None
        if rest[1][0] == "bundle":
            return None, None, "an SSL bundle (spring.ssl.bundle.*) is not read: give the TLS files in --client-config"
    if head == "security" and len(rest) == 2 and rest[1][0] == "protocol":
        return "security.protocol", raw, None
    if role == "producer" and head == "transaction-id-prefix" and len(rest) == 1:
        return None, raw, None
    if len(rest) == 1 and head in fields:
        name, kind = fields[head]
        try:
            return name, _convert(kind, raw), None
        except ValueError:
            raise ClientSettingsError(f"{source}, line {line}: {key}={raw!r}: expected {ALLOWED_VALUES[kind]}") from None
    where = "spring.kafka" if role == "common" else f"spring.kafka.{role}"
    allowed = ", ".join(sorted(fields) + ["properties.*", "ssl.*", "security.protocol"]
                        + (["transaction-id-prefix"] if role == "producer" else []))
    return None, None, (f"not a field of Spring Boot's {where} (allowed: {allowed}); other client "
                        f"properties go under {where}.properties.*")


def parse_spring(text: str, source: str) -> ClientSettings:
    """Pure: the producer and consumer properties a Spring Boot application builds from its
    application.yml / application.properties (default profile), as KafkaProperties maps them:
    common settings first, then the role's own fields, then the role's `properties.*`."""
    entries, notes = default_profile(spring_documents(text, source))
    common: dict[str, Any] = {}
    roles: dict[str, dict[str, Any]] = {"producer": {}, "consumer": {}}
    role_properties: dict[str, dict[str, Any]] = {"producer": {}, "consumer": {}}
    common_properties: dict[str, Any] = {}
    unknown: list[UnknownKey] = []
    transactions = False
    for line, key, raw in entries:
        if not key.startswith(SPRING_PREFIX):
            continue
        segments = key_segments(key)[2:]
        head = segments[0][0] if segments else ""
        if head in SPRING_OTHER_GROUPS:
            unknown.append(UnknownKey(key, line, SPRING_OTHER_GROUPS[head]))
            continue
        role = head if head in roles else "common"
        rest = segments[1:] if role != "common" else segments
        name, value, reason = _spring_role_entry(role, rest, raw, key, line, source)
        if reason:
            unknown.append(UnknownKey(key, line, reason))
        elif name is None:  # transaction-id-prefix: transactional producers, no client property of its own
            transactions = bool(raw.strip())
        elif rest and rest[0][0] == "properties":
            (common_properties if role == "common" else role_properties[role])[name] = value
        else:
            (common if role == "common" else roles[role])[name] = value
    base = {**common, **common_properties}
    producer = {**base, **roles["producer"], **role_properties["producer"]}
    consumer = {**base, **SPRING_CONSUMER_DEFAULTS, **roles["consumer"], **role_properties["consumer"]}
    if "isolation.level" not in {**roles["consumer"], **role_properties["consumer"]}:
        notes.append("consumer isolation.level=read_uncommitted: Spring Boot's default, passed to every consumer")
    return _combine(source, "spring", "java", producer, consumer, unknown=tuple(unknown), notes=tuple(notes),
                    transactions=transactions)


# --- files ---------------------------------------------------------------------------------

def detect_format(path: str | Path, text: str) -> str:
    """Pure: `spring` for a .yml/.yaml file or a properties file with spring.kafka keys, else `java`."""
    if Path(path).suffix.lower() in (".yml", ".yaml"):
        return "spring"
    return "spring" if re.search(r"^\s*spring\.kafka\.", text, re.MULTILINE) else "java"


def read_client_settings(path: str | Path, fmt: str | None = None, role: str = "both") -> ClientSettings:
    """The client settings of one file: `fmt` java, librdkafka or spring (None: detected, see
    `detect_format`); `role` says whose a Java or librdkafka file's properties are."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ClientSettingsError(f"{path}: cannot read it: {e.strerror or e}") from None
    fmt = fmt or detect_format(path, text)
    if fmt not in FORMATS:
        raise ClientSettingsError(f"{path}: format {fmt!r} is not allowed; allowed: {', '.join(FORMATS)}")
    if fmt == "spring":
        return parse_spring(text, str(path))
    return parse_client_properties(text, str(path), fmt, role)


def settings_text(settings: ClientSettings) -> str:
    """Pure: client settings as readable lines (credentials as `***`): each role's properties, unknown keys, notes."""
    summary = settings.producer_summary()
    lines = [f"client settings from {settings.source} ({settings.format}, {settings.client} names): "
             f"producer acks={summary['acks']} idempotence={str(summary['idempotence']).lower()}"
             f"{' transactional' if summary['transactional'] else ''}"]
    if settings.bootstrap:
        lines.append(f"  bootstrap: {settings.bootstrap}")
    if settings.connection:
        lines.append(f"  connection: {connection_text(settings.connection)}")
    for role, config in (("producer", settings.producer), ("consumer", settings.consumer)):
        lines.append(f"  {role}: {connection_text(config) or '(nothing set)'}")
    lines += [f"  unknown: {u.key}" + (f" (line {u.line})" if u.line else "") + f": {u.reason}"
              for u in settings.unknown]
    lines += [f"  note: {n}" for n in settings.notes]
    return "\n".join(lines)
