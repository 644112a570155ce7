"""What each client of a scenario actually runs with: one source of truth for producer and consumer settings.

A scenario sets some client behaviour through its own fields (`consumers.isolation_level`,
`consumers.group`, `consumers.commit`, `producers.transactions`, `producers.bootstrap`) and
everything else through the client's own properties (`producers.config`, `consumers.config`).
A property that duplicates a field would let the two disagree (the worker would run with
one, the analysis judge by the other), so `config_conflicts` refuses them with the field to
use instead. `effective_clients` resolves, once, what every producer and consumer runs with;
the runner records it in the manifest (`clients`) and the analysis reads only that.

Pure functions: no I/O.
"""
from __future__ import annotations

from typing import Any, Mapping

# Client properties that a scenario field owns (librdkafka names and their aliases):
# property -> the field to use instead.
PRODUCER_OWNED: dict[str, str] = {
    "bootstrap.servers": "kafkaproof sets it; choose brokers with producers.bootstrap (broker ids)",
    "metadata.broker.list": "kafkaproof sets it; choose brokers with producers.bootstrap (broker ids)",
    "transactional.id": "kafkaproof gives each producer its own; use producers.transactions",
    "request.required.acks": "an alias of acks; write producers.config.acks",
    "enable.gapless.guarantee": "not supported; use producers.config.enable.idempotence",
}
CONSUMER_OWNED: dict[str, str] = {
    "bootstrap.servers": "kafkaproof sets it to the cluster's addresses; remove it",
    "metadata.broker.list": "kafkaproof sets it to the cluster's addresses; remove it",
    "group.id": "a scenario field owns it; use consumers.group",
    "isolation.level": "a scenario field owns it; use consumers.isolation_level",
    "enable.auto.commit": "a scenario field owns it; use consumers.commit (auto, sync, async or before)",
    "enable.auto.offset.store": "a scenario field owns it; use consumers.commit (auto, sync, async or before)",
}

ACKS_ALL = -1
CLIENTS = ("librdkafka", "java")  # confluent-kafka (librdkafka) | kafka-clients (the Java driver)


class ClientConfigError(ValueError):
    """A client property a scenario may not set; the message names the field to use instead."""


def config_conflicts(role: str, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Pure: (property, what to do instead) for each property of `config` a scenario may not set."""
    owned = PRODUCER_OWNED if role == "producers" else CONSUMER_OWNED
    return [(name, owned[name]) for name in config if name in owned]


def parse_acks(value: Any) -> int:
    """Normalise an `acks` setting to -1 (all), 0 or 1; librdkafka's default is all."""
    if value is None:
        return ACKS_ALL
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return ACKS_ALL
    if text in ("0", "1"):
        return int(text)
    raise ClientConfigError(f"acks={value!r} is not allowed; allowed: all, -1, 0, 1")


def _flag(value: Any, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in ("true", "1", "yes")


def _default_idempotence(client: str, acks: int, config: Mapping[str, Any]) -> bool:
    """librdkafka: off. kafka-clients 3.0+: on, unless a setting it needs is not given (acks not all,
    more than 5 requests in flight, no retries), in which case it is silently off (KIP-679)."""
    if client != "java":
        return False
    in_flight = int(config.get("max.in.flight.requests.per.connection", 5))
    return acks == ACKS_ALL and in_flight <= 5 and str(config.get("retries", "1")).strip() != "0"


def producer_settings(producers: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Pure: what producer `index` of a resolved scenario runs with.

    `acks` (-1/0/1), `idempotence`, `transactional` and whether its delivery reports carry
    broker-assigned offsets (`offsets_from_broker`: never with acks=0, whose reports hold
    offsets no broker assigned), plus the client properties it is started with.
    """
    config = dict(producers.get("config") or {})
    client = producers.get("client", "librdkafka")
    transactional = bool(producers.get("transactions"))
    acks = parse_acks(config.get("acks"))
    idempotence = _flag(config.get("enable.idempotence"), default=_default_idempotence(client, acks, config)) \
        or transactional
    return {"index": index, "client": client, "acks": acks,
            "idempotence": idempotence, "transactional": transactional,
            "offsets_from_broker": acks != 0, "config": config}


def consumer_settings(consumers: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Pure: what consumer `index` of a resolved scenario starts with (group, its protocol, isolation, commit
    strategy); a consumer fault may restart it with other settings (the manifest's `consumer_protocols`)."""
    from .group_protocol import protocol_of
    return {"index": index, "client": consumers.get("client", "librdkafka"),
            "group": consumers.get("group") or "default", "mode": consumers.get("mode", "subscribe"),
            "group_protocol": protocol_of(consumers.get("config")),
            "isolation_level": consumers.get("isolation_level", "read_committed"),
            "commit": consumers.get("commit", "sync"), "config": dict(consumers.get("config") or {})}


def effective_clients(scenario: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Pure: the manifest's `clients` section: one settings entry per producer and consumer process."""
    prod, cons = scenario.get("producers") or {}, scenario.get("consumers") or {}
    return {"producers": [producer_settings(prod, i) for i in range(int(prod.get("count", 1)))],
            "consumers": [consumer_settings(cons, i) for i in range(int(cons.get("count", 0)))]}


# Settings the environment adds to every run (the team's production client or broker settings, or
# a change to check): JSON objects, applied after the scenario's own, recorded in the manifest.
EXTRA_CONFIG_ENV = {"producers": "KAFKAPROOF_EXTRA_PRODUCER_CONFIG", "consumers": "KAFKAPROOF_EXTRA_CONSUMER_CONFIG",
                    "cluster": "KAFKAPROOF_EXTRA_BROKER_CONFIG"}


def environment_overrides(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Pure: the extra settings the environment asks for, by section; ClientConfigError naming the variable."""
    import json
    out: dict[str, dict[str, Any]] = {}
    for section, var in EXTRA_CONFIG_ENV.items():
        raw = env.get(var)
        if not raw:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ClientConfigError(f"{var}: not JSON ({e}); expected an object like {{\"linger.ms\": 5}}") from None
        if not isinstance(value, dict) or not all(isinstance(v, (str, int, float, bool)) for v in value.values()):
            raise ClientConfigError(f"{var}: expected a JSON object of property: value, got {raw!r}")
        if section != "cluster":
            conflicts = config_conflicts(section, value)
            if conflicts:
                name, use = conflicts[0]
                raise ClientConfigError(f"{var}: {name}: {use}")
        out[section] = value
    return out


def apply_overrides(scenario: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Pure: the resolved scenario with the environment's extra settings applied after its own."""
    import copy
    data = copy.deepcopy(dict(scenario))
    for section, extra in overrides.items():
        data[section]["config"] = {**data[section].get("config", {}), **extra}
    return data
