"""Pure: a Kafka container's settings read from its environment, in the three images' conventions.

Which convention a container follows is told by its variables, not its image name (teams build their
own images): any `KAFKA_CFG_*` variable means the bitnami image (`KAFKA_CFG_FOO_BAR` -> `foo.bar`);
otherwise the apache/kafka and Confluent (cp-kafka) images share one mapping (`KAFKA_FOO_BAR` ->
`foo.bar`, `__` -> `_`, `___` -> `-`), minus the launcher's own variables (`KAFKA_HEAP_OPTS`, ...).
From the properties come what attaching needs: the node id (`node.id`, or an older `broker.id`), the
KRaft roles, the listeners and advertised listeners with their security protocols, and the metadata
log directory (the quorum-state file the active controller is read from).

When the environment does not say (a team's image that bakes or mounts its own `server.properties`, or a
launcher that adds its own log directory),
the broker's own config file is read instead (`ConfigFile`, read through the engine by
`attached.read_config_file`): the file its command line names (`kafka.Kafka FILE`,
`kafka-server-start.sh FILE`), else the images' known paths (`KNOWN_CONFIG_PATHS`). The environment
wins over the file where both set a property (the images render the file from it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..errors import ClusterError

# apache/kafka's (and cp-kafka's) launcher variables: JVM options, not broker properties.
LAUNCHER_VARS = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_HEAP_OPT", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_PORT", "KAFKA_JMX_HOSTNAME", "KAFKA_HOME", "KAFKA_CLUSTER_ID",
    "KAFKA_KRAFT_CLUSTER_ID", "KAFKA_ENABLE_KRAFT"})
BITNAMI_PREFIX = "KAFKA_CFG_"
# Where each image keeps its data when the environment names no log directory.
DEFAULT_LOG_DIR = {"bitnami": "/bitnami/kafka/data", "apache": "/tmp/kraft-combined-logs"}
# Where the images keep the broker's config file (apache/kafka and kafkaproof/kafka, bitnami, Confluent, older
# apache/kafka), tried in this order when no process's command line names one.
KNOWN_CONFIG_PATHS = ("/opt/kafka/config/server.properties", "/opt/bitnami/kafka/config/server.properties",
                      "/etc/kafka/kafka.properties", "/opt/kafka/config/kraft/server.properties")
# Kafka's default listener.security.protocol.map: a listener named like a protocol uses it.
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    """One listener: its name, host, port and security protocol."""

    name: str
    host: str
    port: int
    protocol: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class KafkaEnv:
    """What a container's environment says of its Kafka node."""

    convention: str  # bitnami | apache (also Confluent's)
    node_id: int
    roles: tuple[str, ...]
    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    controller_listeners: tuple[str, ...]
    log_dir: str
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


@dataclass(frozen=True)
class ConfigFile:
    """A broker's config file as read from its container: its path (None: none found), its properties, and
    the paths looked at without finding one (for the error message)."""

    path: str | None
    properties: Mapping[str, str] = field(default_factory=dict)
    looked: tuple[str, ...] = ()

    def describe(self) -> str:
        """Where the settings were looked for, as an error message says it."""
        if self.path:
            return f"nor in its config file {self.path}"
        return f"and no broker config file was found ({', '.join(self.looked) or 'no path to look at'})"


def parse_properties(text: str) -> dict[str, str]:
    """Pure: a Java `.properties` file as a dict: `#`/`!` comments, `=`, `:` or blank separators, lines
    continued with a trailing backslash, leading blanks of values dropped; the last of repeated keys wins."""
    out: dict[str, str] = {}
    logical, pending = [], ""
    for raw in text.splitlines():
        line = (pending + raw.lstrip()) if pending else raw.strip()
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd count of backslashes continues the line
            pending = line[:-1]
            continue
        pending = ""
        logical.append(line)
    if pending:
        logical.append(pending)
    for line in logical:
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        i = 0
        while i < len(line) and line[i] not in "=: \t":
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        out[_unescape(key)] = _unescape(rest)
    return out


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(m.group(1), m.group(1)), text)


def config_path_from_commands(commands: Iterable[str]) -> str | None:
    """Pure: the config file a Kafka process was started with, from the containers' process command lines
    (`docker top` args): the argument after the broker's main class `kafka.Kafka`, or after
    `kafka-server-start(.sh)`; None when no process names one."""
    for command in commands:
        args = command.split()
        for i, arg in enumerate(args[:-1]):
            if arg == "kafka.Kafka" or arg.rsplit("/", 1)[-1] in ("kafka-server-start.sh", "kafka-server-start"):
                if args[i + 1].endswith(".properties"):
                    return args[i + 1]
    return None


def needs_config_file(env: Mapping[str, str]) -> bool:
    """Pure: whether the environment leaves out a setting attaching needs: the node id, roles, listeners, or the
    log directory (where the quorum-state file is; the images' launchers may set their own, e.g. in the file)."""
    props = kafka_properties(env)
    return not (props.get("node.id") or props.get("broker.id")) or not props.get("process.roles") or \
        not (props.get("listeners") or props.get("advertised.listeners")) or \
        not any(props.get(k) for k in ("metadata.log.dir", "log.dirs", "log.dir"))


def env_map(env: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    """Pure: `docker inspect`'s Config.Env (`NAME=value` strings), or a mapping, as a dict."""
    if isinstance(env, Mapping):
        return {str(k): str(v) for k, v in env.items()}
    out = {}
    for item in env:
        name, _, value = item.partition("=")
        out[name] = value
    return out


def convention(env: Mapping[str, str]) -> str:
    """Pure: `bitnami` when any `KAFKA_CFG_*` variable is set, else `apache` (apache/kafka and cp-kafka)."""
    return "bitnami" if any(k.startswith(BITNAMI_PREFIX) for k in env) else "apache"


def _apache_name(var: str) -> str:
    key = var[len("KAFKA_"):].replace("___", "\x01").replace("__", "\x02").replace("_", ".")
    return key.replace("\x01", "-").replace("\x02", "_").lower()


def kafka_properties(env: Mapping[str, str]) -> dict[str, str]:
    """Pure: the broker properties an environment sets, in its convention."""
    if convention(env) == "bitnami":
        # bitnami maps `_` to `.` only (no escapes)
        return {k[len(BITNAMI_PREFIX):].replace("_", ".").lower(): v for k, v in env.items()
                if k.startswith(BITNAMI_PREFIX)}
    return {_apache_name(k): v for k, v in env.items()
            if k.startswith("KAFKA_") and k not in LAUNCHER_VARS and not k.startswith("KAFKA_CFG_")}


def parse_listeners(text: str, protocol_map: Mapping[str, str], where: str) -> tuple[Listener, ...]:
    """Pure: `NAME://host:port,...` as Listeners (protocol from the map, else the name when it is one)."""
    out = []
    for item in (x.strip() for x in (text or "").split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ClusterError(f"{where}: listener {item!r} is not NAME://host:port")
        name = name.upper()
        protocol = protocol_map.get(name) or (name if name in PROTOCOLS else "")
        if not protocol:
            raise ClusterError(f"{where}: listener {name} has no security protocol (not in "
                               f"listener.security.protocol.map {dict(protocol_map)})")
        out.append(Listener(name, host.strip("[]"), int(port), protocol))
    return tuple(out)


def parse_protocol_map(text: str) -> dict[str, str]:
    """Pure: `NAME:PROTOCOL,...` as a dict (names upper-cased)."""
    pairs = (x.strip().split(":", 1) for x in (text or "").split(",") if ":" in x)
    return {k.strip().upper(): v.strip().upper() for k, v in pairs}


def read_kafka_env(env: Iterable[str] | Mapping[str, str], where: str, config: ConfigFile | None = None) -> KafkaEnv:
    """Pure: the node a container's environment describes, with its config file's settings (`config`, when
    read) under it; ClusterError naming `where` (the container) and the variable that is missing or wrong."""
    variables = env_map(env)
    conv = convention(variables)
    if conv == "apache" and config and config.path and "bitnami" in config.path:
        conv = "bitnami"
    props = {**(config.properties if config else {}), **kafka_properties(variables)}
    prefix = BITNAMI_PREFIX if conv == "bitnami" else "KAFKA_"
    where_file = f"; {config.describe()}" if config else "; its config file was not read"
    raw_id = props.get("node.id") or props.get("broker.id")
    if raw_id is None:
        raise ClusterError(f"{where}: no node id in its environment ({prefix}NODE_ID, or {prefix}BROKER_ID; "
                           f"{conv} convention){where_file} (node.id)")
    try:
        node_id = int(raw_id)
    except ValueError:
        raise ClusterError(f"{where}: {prefix}NODE_ID={raw_id!r} is not a number") from None
    roles = tuple(r.strip() for r in props.get("process.roles", "").split(",") if r.strip())
    if not roles:
        raise ClusterError(f"{where}: no {prefix}PROCESS_ROLES (a KRaft node's broker/controller roles){where_file} "
                           f"(process.roles); ZooKeeper-mode clusters are not supported")
    bad = set(roles) - {"broker", "controller"}
    if bad:
        raise ClusterError(f"{where}: {prefix}PROCESS_ROLES names {sorted(bad)}; allowed broker, controller")
    pmap = parse_protocol_map(props.get("listener.security.protocol.map", ""))
    listeners = parse_listeners(props.get("listeners", ""), pmap, f"{where}: {prefix}LISTENERS")
    controller_names = tuple(n.strip().upper() for n in props.get("controller.listener.names", "").split(",")
                             if n.strip())
    advertised_text = props.get("advertised.listeners")
    if advertised_text is None:  # Kafka advertises the non-controller listeners as they are
        advertised = tuple(x for x in listeners if x.name not in controller_names)
    else:
        advertised = parse_listeners(advertised_text, pmap, f"{where}: {prefix}ADVERTISED_LISTENERS")
    if "broker" in roles and not advertised:
        raise ClusterError(f"{where}: a broker without listeners in its environment ({prefix}LISTENERS / "
                           f"{prefix}ADVERTISED_LISTENERS){where_file} (listeners)")
    log_dir = (props.get("metadata.log.dir") or props.get("log.dirs", "").split(",")[0].strip()
               or props.get("log.dir") or DEFAULT_LOG_DIR[conv])
    return KafkaEnv(conv, node_id, roles, listeners, advertised, controller_names, log_dir, props)


def client_listener(node: KafkaEnv, published: Mapping[int, int], where: str) -> Listener:
    """Pure: the advertised listener clients on this host use: the one whose advertised port a published
    port of the container reaches (`published`: container port -> host port), preferring an advertised
    host this host resolves to itself. ClusterError naming the container and what it advertises otherwise,
    or when that listener is secured (not supported yet)."""
    by_name = {x.name: x for x in node.listeners}
    candidates = []
    for adv in node.advertised:
        inner = by_name.get(adv.name)
        container_port = inner.port if inner else adv.port
        if published.get(container_port) == adv.port:
            candidates.append(adv)
    if not candidates:
        raise ClusterError(
            f"{where}: no advertised listener is reachable through a published port (advertised "
            f"{', '.join(f'{x.name}://{x.address}' for x in node.advertised) or 'none'}; published "
            f"{', '.join(f'{c}->{h}' for c, h in sorted(published.items())) or 'none'}): publish the port of the "
            f"listener clients on this host use, at the same port it advertises")
    local = [x for x in candidates if x.host in ("localhost", "127.0.0.1", "0.0.0.0", "")]
    chosen = (local or candidates)[0]
    if chosen.protocol != "PLAINTEXT":
        raise ClusterError(f"{where}: its client listener {chosen.name} is {chosen.protocol}; attaching to secured "
                           f"listeners is not built yet (PLAINTEXT only)")
    return chosen
