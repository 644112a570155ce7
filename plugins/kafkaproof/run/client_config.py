"""A scenario's client properties checked against the real client's names, before anything starts.

`producers.config` / `consumers.config` take the chosen client's own property names: the Java
client's (`ProducerConfig.configNames()` / `ConsumerConfig.configNames()` of the kafka-clients
version, asked of the Java driver once per version and cached) or librdkafka's (asked of
librdkafka itself: a client is built with the property alone, nothing connects). So
`max.block.ms` passes for `java` and is refused, with the reason, for `librdkafka`. A Java
configuration whose names are all known is then given to kafka-clients itself (the driver builds
and closes the client a worker would build, without connecting), which refuses combinations such
as `delivery.timeout.ms` below `linger.ms + request.timeout.ms`.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import ScenarioError
from ..spec.client_settings import ClientSettings, UnknownKey
from ..spec.group_protocol import consumer_configs, librdkafka_problem, protocol_of
from . import java_driver

ROLES = ("producers", "consumers")


def unknown_librdkafka_properties(role: str, config: Mapping[str, Any]) -> list[str]:
    """The names of `config` librdkafka does not know (a value it rejects is the worker's error, not ours)."""
    from confluent_kafka import Consumer, KafkaException, Producer
    unknown = []
    for name, value in config.items():
        conf = {name: value if isinstance(value, (bool, int, float)) else str(value), "log_level": 0}
        try:
            if role == "producers":
                Producer(conf)
            else:
                Consumer({"group.id": "kp-config-check", **conf}).close()
        except KafkaException as e:
            if "No such configuration property" in str(e):
                unknown.append(name)
        except (TypeError, ValueError):
            pass
    return unknown


def _worker_spec(role: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a worker spec its client's properties come from (as `ScenarioRun` builds them)."""
    keys = ("config", "transactions") if role == "producers" else ("config", "commit", "group", "isolation_level")
    return {k: section[k] for k in keys if section.get(k) is not None}


def client_config_problems(data: Mapping[str, Any]) -> list[str]:
    """`field: reason` for every property of a resolved scenario its client does not have."""
    problems = []
    for role in ROLES:
        section = data[role]
        config = section.get("config") or {}
        if not config or (role == "consumers" and not section.get("count")):
            continue
        if section.get("client", "librdkafka") == "java":
            version = section.get("client_version") or data["cluster"]["kafka_version"]
            known = java_driver.config_names(role, version)
            unknown = [f"{role}.config.{name}: not a kafka-clients {version} {role[:-1]} property "
                       f"({role[:-1].capitalize()}Config.configNames() has no such name)"
                       for name in config if name not in known]
            refused = None if unknown else java_driver.check_config(role, _worker_spec(role, section), version)
            problems += unknown + ([f"{role}.config: kafka-clients {version} refuses it: {refused}"] if refused else [])
        else:
            problems += [f"{role}.config.{name}: librdkafka has no such property (the names of the Java client, "
                         f"e.g. max.block.ms, need {role}.client: java)"
                         for name in unknown_librdkafka_properties(role, config)]
    return problems + pipeline_config_problems(data) + group_protocol_problems(data)


def pipeline_config_problems(data: Mapping[str, Any]) -> list[str]:
    """`field: reason` for every `pipeline.producer_config` name the copiers' client does not have (the copiers
    run on `consumers.client`: kafka-clients' producer names for java, librdkafka's otherwise)."""
    config = (data.get("pipeline") or {}).get("producer_config") or {}
    if not config:
        return []
    cons = data["consumers"]
    if cons.get("client", "librdkafka") == "java":
        version = cons.get("client_version") or data["cluster"]["kafka_version"]
        known = java_driver.config_names("producers", version)
        return [f"pipeline.producer_config.{name}: not a kafka-clients {version} producer property"
                for name in config if name not in known]
    return [f"pipeline.producer_config.{name}: librdkafka has no such property"
            for name in unknown_librdkafka_properties("producers", config)]


def group_protocol_problems(data: Mapping[str, Any], librdkafka: str | None = None) -> list[str]:
    """`field: reason` when the Python driver's consumers would run group.protocol=consumer on a librdkafka
    (this interpreter's, or `librdkafka`) without it; the Java client's version is the scenario's to check."""
    cons = data["consumers"]
    if not cons.get("count") or cons.get("client", "librdkafka") == "java":
        return []
    fields = [where for where, config in consumer_configs(data) if protocol_of(config) == "consumer"]
    if not fields:
        return []
    if librdkafka is None:
        from .versions import python_client_versions
        librdkafka = python_client_versions()[1].version
    problem = librdkafka_problem(librdkafka)
    return [f"{fields[0]}.group.protocol: {problem}"] if problem else []


def check_client_config(scenario) -> None:
    """ScenarioError naming the file and each field when a client property is not the client's own."""
    problems = client_config_problems(scenario.data)
    if problems:
        raise ScenarioError(f"{scenario.path}: " + "; ".join(problems))


def settings_with_unknown_names(settings: ClientSettings) -> ClientSettings:
    """`settings` with the properties librdkafka does not know added to its unknown keys (a librdkafka file's).

    The names of Java and Spring settings are kafka-clients' to check (`java_driver.config_names`, which
    needs the Java driver built): the audit's later steps do it when they build the replica scenarios.
    """
    import dataclasses
    if settings.client != "librdkafka":
        return settings
    found = [UnknownKey(name, None, f"librdkafka has no such {role} property")
             for role, config in (("producers", settings.producer), ("consumers", settings.consumer))
             for name in unknown_librdkafka_properties(role, config)]
    merged = {(u.key, u.reason): u for u in (*settings.unknown, *found)}
    return dataclasses.replace(settings, unknown=tuple(merged.values()))


def audit_inputs(bootstrap: str | None, connection: Mapping[str, Any] | None, client_config: str | None,
                 app_config: str | None, app_format: str | None, app_role: str | None,
                 missing: str) -> tuple[str, dict[str, Any], ClientSettings | None]:
    """An audit's inputs, the one reading of them for the CLI, the runner and the DAG: (bootstrap, connection
    config, the team's client settings). The connection is `connection` (e.g. an Airflow connection's) with the
    `client_config` file's settings over it; the cluster is `bootstrap`, else the file's bootstrap.servers, else
    the `app_config` file's servers, else ScenarioError(`missing`: how the caller's user names it). Errors name
    the file and what is wrong (an unknown client property: the config-name check's message)."""
    import logging
    from ..spec.client_settings import read_client_settings
    from ..spec.connection import read_client_config
    settings = None
    if app_config:
        settings = settings_with_unknown_names(read_client_settings(app_config, app_format, app_role or "both"))
    merged = dict(connection or {})
    if client_config:
        from_file, file_connection, left_out = read_client_config(client_config)
        if left_out:
            logging.getLogger(__name__).info("client config %s: %s left out", client_config, ", ".join(left_out))
        bootstrap = bootstrap or from_file
        merged.update(file_connection)
    bootstrap = bootstrap or (settings.bootstrap if settings else None)
    if not bootstrap:
        raise ScenarioError(missing)
    return bootstrap, merged, settings
