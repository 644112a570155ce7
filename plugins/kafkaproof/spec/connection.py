"""How clients connect to a cluster: the security settings of a secured (SASL and/or TLS) listener.

A cluster's *connection config* is the part of the client config that says how to reach
the brokers, not how a client behaves: `security.protocol`, `sasl.*`, `ssl.*` and the like,
in librdkafka's names (as an Airflow Kafka connection's Extra holds them). It comes from
`kafkaproof run --client-config FILE`, from the Extra of the Airflow connection a DAG run
names, or from a local cluster started with a secured client listener. Every client of a run
gets it: producers, consumers (both clients: `java_properties` translates it for kafka-clients),
kafkaproof's admin client and the audit drain. A scenario's `producers.config` and
`consumers.config` say how clients behave and win over it.

Secrets never reach a run directory: the manifest records `redacted(config)`, workers get
the config in their environment, not in their spec files.

Pure functions: no I/O except `read_client_config` (reads the one file it is given).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..errors import KafkaproofError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Mechanisms both clients can use with a user name and password from the connection config.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
BOOTSTRAP_KEYS = ("bootstrap.servers", "metadata.broker.list")
# Client behaviour a scenario field owns: an Airflow connection's Extra often carries some of it
# (the default kafka_default has group.id), so it is left out of the connection config, not refused.
BEHAVIOUR_KEYS = ("group.id", "transactional.id", "isolation.level", "enable.auto.commit",
                  "enable.auto.offset.store", "auto.offset.reset")
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
             "ssl.crl.location")
REDACTED = "***"
CONNECTION_ENV = "KAFKAPROOF_CLIENT_CONNECTION"  # a worker's connection config (JSON), see run.workers
PROXY_ON_TLS = ("fault proxies cannot front a {protocol} listener: they read and rewrite Kafka requests, and TLS "
                "hides them. Use a PLAINTEXT or SASL_PLAINTEXT listener for proxy faults, or run without proxy "
                "faults (docs/proxy.md, \"Secured clusters\")")
# librdkafka name -> kafka-clients name, where they differ only by name.
JAVA_NAMES = {"sasl.mechanisms": "sasl.mechanism"}
JAVA_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                     "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                     "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class ConnectionConfigError(KafkaproofError, ValueError):
    """A connection config kafkaproof cannot use; the message names the source, the property and what is allowed."""


def is_secret(name: str) -> bool:
    """Pure: whether a property's value is a credential (passwords, keys, JAAS lines, tokens)."""
    n = name.lower()
    return any(word in n for word in ("password", "secret", "jaas", "token", ".pem", "credential"))


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: `config` with every credential's value replaced by `***`, for manifests, logs and reports."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in config.items()}


def connection_text(config: Mapping[str, Any]) -> str:
    """Pure: a connection config on one line, credentials as `***` (for status output and reports)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(redacted(config).items()))


def split_client_config(config: Mapping[str, Any]) -> tuple[str | None, dict[str, Any], list[str]]:
    """Pure: (bootstrap servers or None, the connection config, keys left out because a scenario field owns them)."""
    bootstrap = next((str(config[k]) for k in BOOTSTRAP_KEYS if config.get(k)), None)
    left_out = sorted(k for k in config if k in BEHAVIOUR_KEYS)
    conn = {k: v for k, v in config.items() if k not in BOOTSTRAP_KEYS and k not in BEHAVIOUR_KEYS}
    return bootstrap, conn, left_out


def security_protocol(config: Mapping[str, Any]) -> str:
    """Pure: the config's security.protocol in upper case (PLAINTEXT when unset)."""
    return str(config.get("security.protocol") or "PLAINTEXT").upper()


def sasl_mechanism(config: Mapping[str, Any]) -> str | None:
    """Pure: the SASL mechanism (librdkafka takes `sasl.mechanisms` and `sasl.mechanism`)."""
    value = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    return str(value).upper() if value else None


def uses_tls(config: Mapping[str, Any]) -> bool:
    return security_protocol(config) in ("SSL", "SASL_SSL")


def connection_problems(config: Mapping[str, Any]) -> list[str]:
    """Pure: what is wrong with a connection config, one message per property (empty: usable)."""
    problems = []
    protocol = security_protocol(config)
    if protocol not in SECURITY_PROTOCOLS:
        problems.append(f"security.protocol={config.get('security.protocol')!r} is not allowed; "
                        f"allowed: {', '.join(SECURITY_PROTOCOLS)}")
    mechanism = sasl_mechanism(config)
    if protocol.startswith("SASL_"):
        if mechanism is None:
            problems.append(f"security.protocol={protocol} needs sasl.mechanism; allowed: {', '.join(SASL_MECHANISMS)}")
        elif mechanism not in SASL_MECHANISMS:
            problems.append(f"sasl.mechanism={mechanism} is not supported; allowed: {', '.join(SASL_MECHANISMS)}")
        for name in ("sasl.username", "sasl.password"):
            if mechanism in SASL_MECHANISMS and not config.get(name):
                problems.append(f"sasl.mechanism={mechanism} needs {name}")
    elif mechanism is not None or any(str(k).startswith("sasl.") for k in config):
        problems.append(f"sasl.* is set but security.protocol={protocol} uses no SASL; "
                        f"set security.protocol to SASL_PLAINTEXT or SASL_SSL")
    if not uses_tls(config) and any(k in config for k in FILE_KEYS):
        problems.append(f"ssl.* files are set but security.protocol={protocol} uses no TLS; "
                        f"set security.protocol to SSL or SASL_SSL")
    for name in BOOTSTRAP_KEYS + BEHAVIOUR_KEYS:
        if name in config:
            problems.append(f"{name} does not belong in a connection config (kafkaproof or the scenario sets it)")
    return problems


def check_connection(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`config` if usable, else ConnectionConfigError naming `source` (a file, an Airflow connection)
    and every problem; referenced files must exist."""
    problems = connection_problems(config)
    problems += [f"{k}={config[k]}: no such file" for k in FILE_KEYS if k in config and not Path(str(config[k])).is_file()]
    if problems:
        raise ConnectionConfigError(f"{source}: " + "; ".join(problems))
    return dict(config)


def property_lines(text: str, source: str) -> list[tuple[int, str, str]]:
    """Pure: (line number, name, value) of each `name=value` (or `name: value`) line of a properties file,
    skipping blank lines and `#`/`!` comments, as Kafka's tools read them."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConnectionConfigError(f"{source}, line {number}: expected name=value, got {raw!r}")
        entries.append((number, line[:sep].strip(), line[sep + 1:].strip()))
    return entries


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Pure: a client properties file (`name=value` lines, `#`/`!` comments, as Kafka's tools read them)."""
    return {name: value for _, name, value in property_lines(text, source)}


def read_client_config(path: str | Path) -> tuple[str | None, dict[str, Any], list[str]]:
    """(bootstrap servers or None, the checked connection config, keys left out) from a client properties file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConnectionConfigError(f"--client-config {path}: cannot read it: {e.strerror or e}") from None
    return client_connection(parse_properties(text, str(path)), str(path))


def client_connection(config: Mapping[str, Any], source: str) -> tuple[str | None, dict[str, Any], list[str]]:
    """(bootstrap servers or None, the checked connection config, keys left out) of a whole client
    config (a properties file's, an Airflow connection's Extra); `source` names it in errors."""
    bootstrap, conn, left_out = split_client_config(config)
    return bootstrap, check_connection(conn, source), left_out


def client_properties_text(config: Mapping[str, Any], bootstrap: str | None = None) -> str:
    """Pure: a client properties file (librdkafka names) for `config`, e.g. for a secured local cluster."""
    lines = [f"bootstrap.servers={bootstrap}"] if bootstrap else []
    return "".join(f"{line}\n" for line in lines + [f"{k}={v}" for k, v in config.items()])


def java_properties(config: Mapping[str, Any]) -> dict[str, str]:
    """Pure: the connection config in kafka-clients' names (for the Java driver).

    librdkafka's user name and password become a JAAS line for the mechanism's login module,
    a CA file a PEM trust store; librdkafka's `none` endpoint identification is Java's empty one.
    Other properties pass as they are (kafka-clients ignores names it does not know, with a warning).
    """
    props: dict[str, str] = {}
    mechanism = sasl_mechanism(config)
    for key, value in config.items():
        if key in ("sasl.username", "sasl.password", "sasl.mechanisms", "sasl.mechanism", "ssl.ca.location"):
            continue
        if key == "ssl.endpoint.identification.algorithm" and str(value).lower() == "none":
            value = ""
        props[JAVA_NAMES.get(key, key)] = str(value)
    if "security.protocol" in config:
        props["security.protocol"] = security_protocol(config)
    if mechanism:
        props["sasl.mechanism"] = mechanism
    if mechanism in JAVA_JAAS_MODULES and "sasl.jaas.config" not in config:
        user, password = (str(config.get(k, "")).replace("\\", "\\\\").replace('"', '\\"')
                          for k in ("sasl.username", "sasl.password"))
        props["sasl.jaas.config"] = f'{JAVA_JAAS_MODULES[mechanism]} required username="{user}" password="{password}";'
    if config.get("ssl.ca.location"):
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(config["ssl.ca.location"])
    return props
