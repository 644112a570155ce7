"""Scenario files: load, validate (JSON Schema + semantic checks), resolve defaults.

Every error names the file, the field (dotted path) and what is allowed, and
is raised before any cluster or process starts.
"""
from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .anomalies import ALLOW_SCHEMA, EXPECTABLE, allow_errors
from . import application as app_section
from .application import (ApplicationSection, check_application_backend, check_application_host,
                          parse_application)
from .clients import CLIENTS, ClientConfigError, config_conflicts, parse_acks
from .cluster import CLUSTER_BACKENDS, compose_topology
from ..errors import ClusterError, FaultError, ScenarioError
from . import (attach as attach_spec, cluster_features, coordinator_targets, copier, exercised, jbod, pipeline_ledger,
               quorum, random_faults, share_group, share_ledger, together, triggers)
from .fault_families import CONSUMER, family_of, kinds_needing
from .corruption import scenario_majority_problem
from .group_protocol import check_group_protocol
from .faults import CORRUPTION_KINDS, FAULT_KINDS, PROXY_KINDS, ROLLING_KINDS, FaultSpec
from .versions import DEFAULT_KAFKA_VERSION, check_version

GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")
# Anomalies a negative control may expect (docs/analysis.md defines them). Not `unseen`: a run
# with unseen values is incomplete, never judged; not `indefinite_landed`: informational only.
ANOMALIES = EXPECTABLE
COMMIT_STRATEGIES = ("auto", "sync", "async", "before")
KEY_DISTRIBUTIONS = ("none", "single", "uniform", "sequential")
CONSUMER_FAULT_KINDS = tuple(CONSUMER.kinds)
# What a fault may wait for after its `at` (faults[].after.event): the state it needs, not the clock.
TRIGGER_EVENTS = ("consumer_commit", "isr_shrunk")
# Conditions a scenario states to make its check meaningful (exercised[].check, spec/exercised.py).
EXERCISE_CHECKS = exercised.EXERCISE_CHECKS
TRANSACTION_ABORT_MODES = ("flush", "purge")
DEFAULT_TRIGGER_TIMEOUT_S = 60.0
DEFAULT_DELIVERY_WITHIN_S = 60.0
MAX_BROKERS = 9
PRESENTATION_FIELDS = ("description", "explanation", "tags")  # not part of what a scenario runs

_CONFIG_MAP = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "kafkaproof scenario",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "guarantee"],
    # kafkaproof's producers, or the application's own (it produces; `producers` is then refused)
    "anyOf": [{"required": ["producers"]}, {"required": ["application"]}],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,62}$",
                 "description": "unique scenario name (lowercase letters, digits, '-', '_')"},
        "description": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "e.g. nightly, seed, smoke"},
        "guarantee": {"enum": list(GUARANTEES), "description": "the delivery guarantee the scenario claims"},
        "expect": {
            "description": "`pass`, or a negative control: `{detect: [anomaly, ...]}` that must be found",
            "oneOf": [{"const": "pass"},
                      {"type": "object", "additionalProperties": False, "required": ["detect"],
                       "properties": {"detect": {"type": "array", "minItems": 1, "items": {"enum": list(ANOMALIES)}},
                                      "why": {"type": "string"}}}]},
        "explanation": {"type": "string", "description": "what the scenario shows and why (for the report)"},
        "allow": ALLOW_SCHEMA,
        "cluster": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "brokers": {"type": "integer", "minimum": 1, "maximum": MAX_BROKERS},
                "controllers": {"type": "integer", "minimum": 0, "maximum": 5},
                "kafka_version": {"type": "string"},
                "config": _CONFIG_MAP,
                "node_config": {"type": "object", "patternProperties": {"^[0-9]+$": _CONFIG_MAP},
                                "additionalProperties": False},
                "proxy": {"type": "boolean",
                          "description": "a fault proxy in front of each broker on the client path "
                                         "(default: on when the timeline has a proxy fault)"},
                "clock": {"type": "boolean",
                          "description": "nodes run under libfaketime, so clock faults can shift their clocks "
                                         "(default: on when the timeline has a clock fault; local backend)"},
                "log_dirs": jbod.SCHEMA,
                **quorum.CLUSTER_SCHEMA,
                "disk": {"type": "boolean",
                         "description": "log directories on diskfs (FUSE), so disk faults can fail them, slow "
                                        "them, fill them or cut the power (default: on when the timeline has a "
                                        "disk fault; local backend)"},
                "backend": {"enum": list(CLUSTER_BACKENDS),
                            "description": "local: Kafka JVMs on this host (default); compose: containers of a "
                                           "Docker Compose project (compose/)"},
                "compose_file": {"type": "string", "minLength": 1, "description": "compose backend: your own compose "
                                 "file instead of compose/<topology>.yml (relative to this scenario file), keeping "
                                 "kafkaproof's service names, addresses and labels (docs/compose.md)"},
                "features": cluster_features.SCHEMA, "elr": cluster_features.ELR_SCHEMA,
                "attach": attach_spec.SCHEMA,
                "image": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$",
                          "description": "compose backend: the Kafka image (default kafkaproof/kafka:<kafka_version>, "
                                         "built locally); any image configured like apache/kafka"},
            }},
        "share": share_group.SCHEMA,
        "topic": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$"},
                "create": {"type": "boolean", "description": "false: let the producer auto-create it"},
                "partitions": {"type": "integer", "minimum": 1, "maximum": 64},
                "replication_factor": {"type": "integer", "minimum": 1, "maximum": 9},
                "config": _CONFIG_MAP,
            }},
        "producers": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 16},
                "rate": {"type": ["number", "null"], "exclusiveMinimum": 0,
                         "description": "target sends/s per producer (open loop); null = as fast as possible"},
                "messages": {"type": "integer", "minimum": 1, "description": "values per producer"},
                "duration_s": {"type": "number", "exclusiveMinimum": 0},
                "start_after_s": {"type": "number", "minimum": 0},
                "value_size": {"type": "integer", "minimum": 40, "maximum": 1048576},
                "keys": {"type": "object", "additionalProperties": False,
                         "properties": {"distribution": {"enum": list(KEY_DISTRIBUTIONS)},
                                        "count": {"type": "integer", "minimum": 1},
                                        "key": {"type": "string"}}},
                "bootstrap": {"type": "array", "items": {"type": "integer"}, "minItems": 1,
                              "description": "broker ids the producer bootstraps from (default: all)"},
                "client": {"enum": list(CLIENTS),
                           "description": "librdkafka (confluent-kafka, default) or java (kafka-clients); config "
                                          "takes that client's own property names"},
                "client_version": {"type": "string",
                                   "description": "java: the kafka-clients version (default cluster.kafka_version)"},
                "config": _CONFIG_MAP,
                "transactions": {"type": "object", "additionalProperties": False, "required": ["batch"],
                                 "properties": {"batch": {"type": "integer", "minimum": 1},
                                                "abort_probability": {"type": "number", "minimum": 0, "maximum": 1},
                                                "abort": {"enum": list(TRANSACTION_ABORT_MODES),
                                                          "description": "flush (default): an aborted transaction's "
                                                                         "records are written, then aborted (they sit "
                                                                         "in the log between markers); purge: aborted "
                                                                         "while still queued, so they are never sent"}}},
            }},
        "application": app_section.SCHEMA,
        "pipeline": copier.SCHEMA,
        "consumers": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "count": {"type": "integer", "minimum": 0, "maximum": 16},
                "mode": {"enum": ["subscribe", "assign"]},
                "group": {"type": "string"},
                "isolation_level": {"enum": ["read_committed", "read_uncommitted"]},
                "commit": {"enum": list(COMMIT_STRATEGIES),
                           "description": "auto-commit, sync/async after processing, or before processing"},
                "processing_ms": {"type": "number", "minimum": 0},
                "client": {"enum": list(CLIENTS),
                           "description": "librdkafka (confluent-kafka, default) or java (kafka-clients); config "
                                          "takes that client's own property names"},
                "client_version": {"type": "string",
                                   "description": "java: the kafka-clients version (default cluster.kafka_version)"},
                "config": _CONFIG_MAP,
            }},
        "faults": {
            "type": "array",
            "items": together.timeline_item_schema({
                      "type": "object", "additionalProperties": False, "required": ["at", "kind"],
                      "properties": {"at": {"type": "number", "minimum": 0,
                                            "description": "seconds after the workload starts"},
                                     "kind": {"enum": list(FAULT_KINDS)},
                                     "target": {"type": "string",
                                                "description": "node:<id>, broker:<id>, leader:<p>, all, ... "
                                                               "(resolved when injected)"},
                                     "duration": {"type": "number", "minimum": 0,
                                                  "description": "heal this many seconds after the injection "
                                                                 "(default: when producers finish)"},
                                     "after": {
                                         "type": "object", "additionalProperties": False, "required": ["event"],
                                         "description": "from `at` on, wait for this state before injecting",
                                         "properties": {
                                             "event": {"enum": list(TRIGGER_EVENTS)},
                                             "consumer": {"type": "integer", "minimum": 0,
                                                          "description": "consumer_commit: whose next commit"},
                                             "partition": {"type": "integer", "minimum": 0,
                                                           "description": "isr_shrunk: the partition"},
                                             "delay_s": {"type": "number", "minimum": 0,
                                                         "description": "then wait this long (default 0)"},
                                             "timeout_s": {"type": "number", "exclusiveMinimum": 0,
                                                           "description": "give up (the run is an error) after "
                                                                          "this long (default 60)"}}},
                                     "group": {"type": "integer", "minimum": 0, "description": together.GROUP_DOC},
                                     "params": {"type": "object",
                                                "description": "kind-specific; see `kafkaproof fault list --kinds`"}}})},
        "claims": {
            "type": "object", "additionalProperties": False,
            "description": "application-level claims judged besides the guarantee",
            "properties": {
                "delivery": {
                    "type": "object", "additionalProperties": False,
                    "description": "every value the application attempted to send (any outcome) reaches every "
                                   "consumer group, the application re-sending nothing beyond what the client does",
                    "properties": {"within_s": {"type": "number", "exclusiveMinimum": 0,
                                                "description": "read at most this long after the last fault "
                                                               "healed (or after it was sent, if later); default 60"}}},
                "processed_once": {
                    "type": "object", "additionalProperties": False, "properties": {},
                    "description": "no consumer group processes a value more than once (an idempotent consumer), "
                                   "whatever copies the log holds: forbids `reprocessed`"},
                "exactly_once_pipeline": pipeline_ledger.CLAIM_SCHEMA,
                "share_group": share_ledger.CLAIM_SCHEMA}},
        "exercised": exercised.SCHEMA,
        "drain": {"type": "object", "additionalProperties": False,
                  "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0},
                                 "settle_s": {"type": "number", "minimum": 0}}},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": "hard limit of the whole run"},
        "limits": {"type": "object", "additionalProperties": False,
                   "properties": {"min_free_disk_mb": {
                       "type": "number", "minimum": 0,
                       "description": "end the workload early (then heal, drain and judge what was sent) when "
                                      "the run's or the local cluster's filesystem has less free space (default "
                                      "256)"}}},
    },
}

DEFAULTS: dict[str, Any] = {
    "description": "", "tags": [], "expect": "pass", "explanation": "",
    "cluster": {"brokers": 3, "controllers": 0, "kafka_version": DEFAULT_KAFKA_VERSION, "config": {}, "node_config": {}},
    "topic": {"create": True, "partitions": 3, "replication_factor": 3, "config": {}},
    "producers": {"count": 1, "rate": 500, "messages": 5000, "start_after_s": 2, "value_size": 100,
                  "keys": {"distribution": "uniform", "count": 50}, "config": {"acks": "all"}},
    "consumers": {"count": 1, "mode": "subscribe", "isolation_level": "read_committed", "commit": "sync",
                  "processing_ms": 0, "config": {}},
    "faults": [],
    "drain": {"timeout_s": 60, "settle_s": 3},
    "timeout_s": 900,
}


@dataclass(frozen=True)
class TimelineFault:
    """One entry of a scenario's fault timeline."""

    at: float
    spec: FaultSpec
    duration: float | None
    index: int = 0  # position in the scenario's `faults` list
    after: dict[str, Any] | None = None  # trigger: the state to wait for from `at` on
    group: int | None = None  # faults of one group start at one instant (spec/together.py)

    @property
    def trigger_timeout_s(self) -> float:
        return float((self.after or {}).get("timeout_s", DEFAULT_TRIGGER_TIMEOUT_S))

    def describe(self) -> str:
        """One line: what, on what, when (for logs and progress)."""
        when = f"at {self.at:g}s"
        if self.after:
            who = self.after.get("consumer", self.after.get("partition"))
            when += f" after {self.after['event']}" + (f" {who}" if who is not None else "")
            if self.after.get("delay_s"):
                when += f" + {self.after['delay_s']:g}s"
        target = self.spec.resolved_target or self.spec.params.get("groups")
        return f"{self.spec.kind} {target} {when}" + (f" for {self.duration:g}s" if self.duration is not None else "")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario with every default filled in (`data` is the resolved document)."""

    name: str
    path: str
    data: dict[str, Any]

    @property
    def guarantee(self) -> str:
        return self.data["guarantee"]

    @property
    def directory(self) -> Path | None:
        """The scenario file's directory (relative paths in it, e.g. `cluster.compose_file`, start there)."""
        return Path(self.path).parent if self.path else None

    def to_json(self) -> dict[str, Any]:
        """The resolved scenario as JSON (it travels between Airflow tasks as is: no file is read again)."""
        return {"name": self.name, "path": self.path, "data": self.data}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Scenario":
        """Inverse of `to_json`."""
        return cls(doc["name"], doc["path"], doc["data"])

    @property
    def expect(self) -> dict[str, Any]:
        """Normalised: {"outcome": "pass", "detect": []} or {"outcome": "detect", "detect": [...]}."""
        e = self.data["expect"]
        return {"outcome": "pass", "detect": []} if e == "pass" else {"outcome": "detect", "detect": list(e["detect"])}

    @property
    def topic(self) -> str:
        return self.data["topic"]["name"]

    @property
    def claims(self) -> dict[str, Any]:
        """Application-level claims (`claims.delivery`), with defaults filled in; {} when none."""
        claims = dict(self.data.get("claims") or {})
        if "delivery" in claims:
            claims["delivery"] = {"within_s": DEFAULT_DELIVERY_WITHIN_S, **(claims["delivery"] or {})}
        return claims

    @property
    def exercised(self) -> list[dict[str, Any]]:
        """The scenario's own exercised conditions (each fault kind adds its default check in the analysis)."""
        return [dict(c) for c in self.data.get("exercised") or []]

    @property
    def application(self) -> ApplicationSection | None:
        """The application under test (issue 39), checked and with its defaults; None without one. Relative
        `cwd`s start at the scenario file's directory. Pure: the host checks ran when the file was loaded."""
        section = self.data.get("application")
        return parse_application(section, f"{self.path}: application", self.directory) if section else None

    @property
    def random_faults(self) -> dict[str, Any] | None:
        """The random schedule spec (`faults: {random: ...}`), None for a timeline."""
        return self.data.get("random_faults")

    def with_random_schedule(self, seed: int | None = None, known_nodes: bool = True) -> "Scenario":
        """The scenario with its random schedule drawn into an ordinary timeline (`seed`: the file's, else
        the one given, else a new one), the seed and the drawn timeline recorded in `random_faults`; a
        scenario already drawn (a replay) or without a random schedule as it is. With `known_nodes` (a
        cluster kafkaproof starts: its node ids are the scenario's) the target `random` is drawn too."""
        spec = self.random_faults
        if not spec or spec.get("drawn"):
            return self
        seed = spec.get("seed", seed if seed is not None else random.SystemRandom().randrange(2**31))
        data = copy.deepcopy(self.data)
        brokers, controllers = data["cluster"]["brokers"], data["cluster"]["controllers"]
        broker_ids = list(range(1, brokers + 1)) if known_nodes else []
        node_ids = broker_ids + list(range(101, 101 + controllers)) if known_nodes else []
        # the application's drive has the producers' rate, messages and duration_s
        workload = (data.get("application") or {}).get("drive") or data["producers"]
        data["faults"] = random_faults.draw_schedule(spec, seed, random_faults.workload_horizon_s(workload),
                                                     node_ids, broker_ids)
        data["random_faults"] = {**spec, "seed": seed, "drawn": True}
        drawn = Scenario(self.name, self.path, data)
        _check_semantics(drawn.data, f"{self.path} (random schedule, seed {seed})")
        return drawn

    @property
    def upgrade_versions(self) -> list[str]:
        """The Kafka versions the timeline's rolling upgrades go to (installed before the cluster starts)."""
        return sorted({f["params"]["version"] for f in self.data["faults"] if f["kind"] == "rolling_upgrade"})

    def timeline(self) -> list[TimelineFault]:
        return sorted((TimelineFault(f["at"], FaultSpec(f["kind"], f.get("target", ""), f.get("params", {})),
                                     f.get("duration"), i, f.get("after"), f.get("group"))
                       for i, f in enumerate(self.data["faults"])), key=lambda t: (t.at, t.index))

    def hash(self) -> str:
        """Stable hash of what the scenario runs (history compares runs of equal hashes).

        Covers the resolved configuration, overrides included; not the words around it
        (description, explanation, tags), so retagging or rewording keeps a scenario's history.
        """
        runs = {k: v for k, v in self.data.items() if k not in PRESENTATION_FIELDS}
        return hashlib.sha256(json.dumps(runs, sort_keys=True).encode()).hexdigest()[:16]

    def with_overrides(self, messages: int | None = None, kafka_version: str | None = None,
                       brokers: int | None = None, bootstrap: str | None = None,
                       backend: str | None = None, client: str | None = None,
                       upgrade_to: str | None = None, attach: str | None = None) -> "Scenario":
        """The scenario with a run's overrides applied (message scale, Kafka version, broker count, backend,
        the client every producer and consumer runs: a client matrix runs a scenario once per client;
        `upgrade_to`: the version every rolling_upgrade of the timeline rolls to; `attach`: a running compose
        project of the user's, checked as `cluster.attach` is).

        The result is checked again like a scenario file, so an override the scenario cannot take
        (e.g. fewer brokers than its replication factor, or a broker count for an existing cluster
        at `bootstrap`) fails here, before anything starts.
        """
        if brokers is not None and bootstrap:
            raise ScenarioError(f"{self.path}: cluster.brokers (override): a broker count applies to the local "
                                f"cluster only; the existing cluster at {bootstrap} has the brokers it has")
        data = copy.deepcopy(self.data)
        if attach is not None:
            data = attach_spec.with_attach(data, attach, str(self.path))
        if messages is not None:
            workload = data["application"]["drive"] if data.get("application") else data["producers"]
            workload["messages"] = messages
            workload.pop("duration_s", None)
        if kafka_version is not None:
            data["cluster"]["kafka_version"] = check_version(kafka_version)
        if upgrade_to is not None:
            rolls = [f for f in data["faults"] if f["kind"] == "rolling_upgrade"]
            if not rolls:
                raise ScenarioError(f"{self.path}: faults (override upgrade_to={upgrade_to}): the scenario has no "
                                    f"rolling_upgrade to aim at another version")
            for f in rolls:
                f["params"]["version"] = upgrade_to
        if kafka_version is not None or upgrade_to is not None:
            _check_semantics(data, f"{self.path} (with kafka_version={data['cluster']['kafka_version']})")
        if brokers is not None:
            if not 1 <= brokers <= MAX_BROKERS:
                raise ScenarioError(f"{self.path}: cluster.brokers (override): {brokers} is not allowed; "
                                    f"allowed: 1..{MAX_BROKERS}")
            data["cluster"]["brokers"] = brokers
            _check_semantics(data, f"{self.path} (with brokers={brokers})")
        if backend is not None and backend != data["cluster"].get("backend", "local"):
            if bootstrap:
                raise ScenarioError(f"{self.path}: cluster.backend (override): {backend!r} starts a cluster; "
                                    f"the existing cluster at {bootstrap} is used as it is")
            if backend not in CLUSTER_BACKENDS:
                raise ScenarioError(f"{self.path}: cluster.backend (override): {backend!r} is not allowed; "
                                    f"allowed: {', '.join(CLUSTER_BACKENDS)}")
            data["cluster"]["backend"] = backend
            _check_semantics(data, f"{self.path} (with backend={backend})")
        if client is not None:
            if client not in CLIENTS:
                raise ScenarioError(f"{self.path}: producers.client (override): {client!r} is not allowed; "
                                    f"allowed: {', '.join(CLIENTS)}")
            for role in ("producers", "consumers"):
                if data[role].get("client", "librdkafka") != client:
                    data[role]["client"] = client
                    data[role].pop("client_version", None)  # the other client's version does not carry over
        return Scenario(self.name, self.path, data)


def _merge(defaults: dict, given: dict) -> dict:
    out = copy.deepcopy(defaults)
    for k, v in given.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("config", "node_config", "params"):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _prefixed(error, key: str):
    """A schema error of a part of the document, placed under `key` (its field path names the whole)."""
    error.path.appendleft(key)
    return error


def _field_path(error) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _schema_message(error) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return f"unknown field(s) {', '.join(map(repr, extra))}; allowed: {', '.join(allowed)}"
    if error.validator == "enum":
        return f"{error.instance!r} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    if error.validator == "anyOf" and not error.absolute_path:
        return ("'producers' is required (kafkaproof's producers), unless the scenario has an `application` "
                "section (the application produces)")
    if error.validator == "oneOf" and _field_path(error) == "expect":
        return f"{error.instance!r} is not allowed; write `pass` or `{{detect: [anomaly, ...]}}` with anomalies from: {', '.join(ANOMALIES)}"
    return error.message


def validate_document(doc: Any, source: str, base_dir: Path | None = None) -> dict[str, Any]:
    """Validate a parsed scenario document; returns it resolved with defaults. Raises ScenarioError.
    `base_dir`: the scenario file's directory, where an application's relative `cwd`s start (the current
    directory when None); the application's commands and directories are looked up on this host."""
    import jsonschema
    if not isinstance(doc, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping, got {type(doc).__name__}")
    random_spec = None
    if isinstance(doc.get("faults"), dict):  # `faults: {random: ...}`: checked on its own, kept apart
        doc = dict(doc)
        random_spec = doc.pop("faults")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = list(validator.iter_errors(doc))
    if random_spec is not None:
        errors += [_prefixed(e, "faults") for e in
                   jsonschema.Draft202012Validator(RANDOM_FAULTS_SCHEMA).iter_errors(random_spec)]
    errors.sort(key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        lines = [f"{source}: {_field_path(e)}: {_schema_message(e)}" for e in errors[:10]]
        raise ScenarioError("invalid scenario\n  " + "\n  ".join(lines))
    if "application" in doc and "producers" in doc:
        raise ScenarioError(f"{source}: producers: an application scenario's events come from the application "
                            f"(application.drive); kafkaproof's own producers alongside it are not supported: "
                            f"remove producers")
    data = _merge(DEFAULTS, doc)
    data["faults"] = together.expand(data["faults"])
    if "application" in doc:
        data["producers"]["count"] = 0  # the application produces; kafkaproof runs none of its own
    if random_spec is not None:
        data["random_faults"] = random_spec["random"]
    given_producers = doc.get("producers", {})
    if "duration_s" in given_producers and "messages" not in given_producers:
        data["producers"].pop("messages")  # a duration replaces the default message count
    data["topic"].setdefault("name", f"kp-{data['name']}")
    _check_semantics(data, source, doc.get("consumers") or {})
    if data.get("application"):
        where = f"{source}: application"
        check_application_host(parse_application(data["application"], where, base_dir), where)
    return data


def _check_semantics(data: dict, source: str, given_consumers: dict | None = None) -> None:
    def fail(field: str, message: str) -> None:
        raise ScenarioError(f"{source}: {field}: {message}")

    try:
        check_version(str(data["cluster"]["kafka_version"]))
    except Exception as e:
        fail("cluster.kafka_version", str(e))
    attach_spec.check_attach(data, source)
    brokers = data["cluster"]["brokers"]
    controllers = data["cluster"]["controllers"]
    spares = data["cluster"].get("spare_controllers", 0)  # dedicated controllers after the others (spec/quorum.py)
    node_ids = list(range(1, brokers + 1)) + list(range(101, 101 + controllers + spares))
    if data["cluster"].get("backend") == "compose" and not data["cluster"].get("attach"):
        try:
            compose_topology(brokers, controllers)
        except ClusterError as e:
            fail("cluster.backend", f"compose: {e}")
    if data.get("application"):
        check_application_backend(data["application"], data["cluster"].get("backend", "local"),
                                  bool(data["cluster"].get("proxy")), f"{source}: application")
    else:
        for key in ("image", "compose_file"):
            if data["cluster"].get(key):
                fail(f"cluster.{key}", "only the compose backend takes it (set cluster.backend: compose); the "
                                       "local backend runs the jars of cluster.kafka_version on this host")
    topic = data["topic"]
    if topic["replication_factor"] > brokers:
        fail("topic.replication_factor", f"{topic['replication_factor']} is more than the {brokers} broker(s)")
    for nid in data["cluster"]["node_config"]:
        if int(nid) not in node_ids:
            fail(f"cluster.node_config.{nid}", f"no such node; nodes are {node_ids}")
    prod = data["producers"]
    for b in prod.get("bootstrap", []):
        if b not in range(1, brokers + 1):
            fail("producers.bootstrap", f"broker {b} does not exist; brokers are 1..{brokers}")
    if prod.get("transactions") and str(prod["config"].get("enable.idempotence", "true")).lower() == "false":
        fail("producers.config.enable.idempotence", "transactions need idempotence; remove enable.idempotence=false")
    for role in ("producers", "consumers"):
        for name, use in config_conflicts(role, data[role]["config"]):
            fail(f"{role}.config.{name}", use)
    try:
        parse_acks(prod["config"].get("acks"))
    except ClientConfigError as e:
        fail("producers.config.acks", str(e))
    application = parse_application(data["application"], f"{source}: application", None) \
        if data.get("application") else None
    copier.check_pipeline(data, given_consumers or {}, fail)
    share_group.check_share(data, fail)  # before the consumer targets: the share consumers are the consumers
    cons = data["consumers"]
    if cons["count"] and cons["mode"] == "subscribe":
        cons.setdefault("group", f"kp-{data['name']}")
    if cons["mode"] == "assign" and cons["count"] > 1:
        fail("consumers.count", "assign mode supports one consumer (it reads every partition)")
    jbod.check(data, fail)
    cluster_features.check(data, fail)  # folds cluster.elr into cluster.features
    quorum.check(data, fail)
    together.check_groups(data["faults"], brokers, node_ids, lambda k: FaultSpec(k).resolved_target, fail)
    proxy_faults = [i for i, f in enumerate(data["faults"]) if f["kind"] in PROXY_KINDS]
    if proxy_faults:
        if data["cluster"].get("proxy") is False:
            i = proxy_faults[0]
            fail("cluster.proxy", f"false, but faults[{i}] ({data['faults'][i]['kind']}) needs the fault proxy; "
                                  f"remove cluster.proxy or set it to true")
        data["cluster"]["proxy"] = True  # implied (only written when on: older scenarios keep their hash)
    for setting, kinds in NODE_FEATURES.items():
        needing = [i for i, f in enumerate(data["faults"]) if f["kind"] in kinds]
        if needing:
            _imply_node_feature(data, setting, f"faults[{needing[0]}] ({data['faults'][needing[0]]['kind']})", fail)
    for i, f in enumerate(data["faults"]):
        where = f"faults[{i}]"
        target = f.get("target", "")
        if f.get("after"):
            triggers.check_trigger(f["after"], f"{where}.after", data, fail)
        if target.startswith("consumer:"):
            if f["kind"] not in CONSUMER_FAULT_KINDS:
                fail(f"{where}.kind", f"{f['kind']!r} cannot target a consumer; allowed: {', '.join(CONSUMER_FAULT_KINDS)}")
            idx = target.split(":", 1)[1]
            if not idx.isdigit() or int(idx) >= cons["count"]:
                fail(f"{where}.target", f"{target!r}: consumers are consumer:0..consumer:{cons['count'] - 1}")
        elif target.startswith(APP_TARGET_PREFIX):
            _check_app_fault(f, where, application, fail)
            continue
        try:
            FaultSpec(f["kind"], target, f.get("params", {})).validate(where)
        except FaultError as e:
            raise ScenarioError(f"{source}: {e}") from None
        if target.startswith("consumer:"):  # its params checked; which consumers exist, above
            continue
        for prefix in ("leader:", "follower:", "followers:"):
            rest = target[len(prefix):] if target.startswith(prefix) else None
            if rest is not None and ":" not in rest and int(rest) >= topic["partitions"]:
                fail(f"{where}.target", f"partition {rest} does not exist; the topic has partitions "
                                        f"0..{topic['partitions'] - 1}")
        for prefix in ("node:", "nodes:"):
            if target.startswith(prefix):
                for nid in target[len(prefix):].split(","):
                    if int(nid) not in node_ids:
                        fail(f"{where}.target", f"node {nid} does not exist; nodes are {node_ids}")
        if target.startswith("broker:") and int(target[7:]) not in range(1, brokers + 1):
            fail(f"{where}.target", f"broker {target[7:]} does not exist; brokers are 1..{brokers}")
        if f["kind"] in ROLLING_KINDS:
            _check_rolling(f, where, data, fail)
        if f["kind"] in CORRUPTION_KINDS and (problem := scenario_majority_problem(f, brokers, controllers, topic)):
            fail(f"{where}.params.allow_majority", problem)
        if f["kind"] in PROXY_KINDS:
            named = [int(x) for x in target.split(":", 1)[1].split(",")] if target.startswith(("node:", "nodes:")) else []
            if any(n > brokers for n in named) or (target == "controller" and controllers):
                fail(f"{where}.target", f"{target!r} is a dedicated controller; proxy faults target brokers "
                                        f"(1..{brokers}): they act on the clients' requests")
    check_group_protocol(data, fail)  # consumers.config and each consumer fault's restart settings
    coordinator_targets.check(data, fail)  # group_coordinator, share_coordinator, txn_coordinator:<copier>
    for name, why in allow_errors(data.get("allow")):
        fail(name, why)
    if data.get("random_faults"):
        _check_random(data, fail)
    for i, cond in enumerate(data.get("exercised") or []):
        exercised.check_exercise(cond, f"exercised[{i}]", data, fail)
    if (data.get("claims") or {}).get("delivery") is not None and not cons["count"]:
        fail("claims.delivery", "needs consumers (consumers.count >= 1): it claims every value reaches them")
    if "processed_once" in (data.get("claims") or {}):
        app = data.get("application")
        if app is not None and not app.get("processed"):
            fail("claims.processed_once", "needs application.processed: it judges what the consumer side processed")
        elif app is None and not cons["count"]:
            fail("claims.processed_once", "needs consumers (consumers.count >= 1): it judges what they read")


APP_TARGET_PREFIX = "app:"


def _check_app_fault(fault: dict, where: str, application: ApplicationSection | None, fail) -> None:
    """A fault on the application (`app:<service>`, `app:<service>:<i>`): a declared service and instance, a
    kind of the fault family whose targets start with `app:` (spec.fault_families), its parameters."""
    target = fault["target"]
    if application is None:
        fail(f"{where}.target", f"{target!r}: app: targets need an application section (the services to fault)")
    allowed = application.targets()
    if target not in allowed:
        fail(f"{where}.target", f"{target!r} is not a service or instance of the application; allowed: "
                                f"{', '.join(allowed)}")
    try:
        family = family_of(fault["kind"], target)
    except FaultError as e:
        fail(f"{where}.kind", str(e))
    if family.target_prefix != APP_TARGET_PREFIX:
        fail(f"{where}.kind", f"{fault['kind']!r} on {target!r}: no fault family acts on the application's "
                              f"services in this kafkaproof (issue 39's app faults)")
    params = family.kinds[fault["kind"]]
    for name in fault.get("params") or {}:
        if name not in params:
            fail(f"{where}.params.{name}", f"not a parameter of {fault['kind']}; allowed: {', '.join(params) or 'none'}")


# Node features of the local backend that fault kinds need: the cluster setting, the kinds, and what it does.
NODE_FEATURES = {setting: kinds_needing(setting) for setting in ("clock", "disk")}
_NODE_FEATURE_WHAT = {"clock": "its nodes are started under libfaketime",
                      "disk": "its nodes' log directories are on diskfs"}


def _imply_node_feature(data: dict, setting: str, needed_by: str, fail) -> None:
    """A clock fault needs its cluster's nodes started under libfaketime, a disk fault their log directories
    on diskfs: `cluster.clock` / `cluster.disk` is implied (only written when on, so other scenarios keep
    their hash); only the local backend has them."""
    if data["cluster"].get(setting) is False:
        fail(f"cluster.{setting}", f"false, but {needed_by} needs it; remove cluster.{setting} or set it to true")
    if data["cluster"].get("backend", "local") != "local":
        fail("cluster.backend", f"{data['cluster']['backend']}: {needed_by} needs the local backend "
                                f"({_NODE_FEATURE_WHAT[setting]})")
    data["cluster"][setting] = True


def _check_random(data: dict, fail) -> None:
    """A random schedule: valid ranges, every kind valid on each of its targets, the proxy when drawn."""
    spec = data["random_faults"]
    if data["faults"] and not spec.get("drawn"):
        fail("faults", "a timeline and a random schedule at once; give one")

    def check_fault(kind: str, target: str, params, where: str) -> None:
        try:
            FaultSpec(kind, target, params).validate(where)
        except FaultError as e:
            fail(str(e).split(":", 1)[0], str(e).split(": ", 1)[1])
    random_faults.check_spec(spec, "faults.random", check_fault, fail)
    if any(k["kind"] in PROXY_KINDS for k in spec["kinds"]):
        if data["cluster"].get("proxy") is False:
            fail("cluster.proxy", "false, but faults.random draws proxy faults; remove cluster.proxy or set it to true")
        data["cluster"]["proxy"] = True
    for setting, kinds in NODE_FEATURES.items():
        if any(k["kind"] in kinds for k in spec["kinds"]):
            _imply_node_feature(data, setting, f"faults.random (it draws {setting} faults)", fail)
    for i, cond in enumerate(data.get("exercised") or []):
        if "before_fault" in cond:
            fail(f"exercised[{i}].before_fault", "names a fault of a timeline; a random schedule has none up front")


ROLLING_TARGETS = ("all", "brokers", "node:<id>", "nodes:<id>,<id>")


def _check_rolling(fault: dict, where: str, data: dict, fail) -> None:
    """A rolling fault rolls named nodes (or all), takes no duration, and changes something."""
    target = fault.get("target", "")
    if target and target not in ("all", "brokers") and not target.startswith(("node:", "nodes:")):
        fail(f"{where}.target", f"{target!r}: a rolling fault rolls nodes named up front; allowed: "
                                f"{', '.join(ROLLING_TARGETS)} (default all)")
    if fault.get("duration") is not None:
        fail(f"{where}.duration", "a rolling fault takes no duration: it ends when the last node is back in its ISRs")
    version = (fault.get("params") or {}).get("version")
    cluster = data["cluster"]
    if version is not None and version == str(cluster["kafka_version"]):
        fail(f"{where}.params.version", f"{version} is what the cluster starts on (cluster.kafka_version); "
                                        f"roll to another version")
    if version is not None and cluster.get("image"):
        fail("cluster.image", f"a rolling_upgrade ({where}) starts each node on kafkaproof/kafka:<version>; "
                              f"a cluster on a given image cannot be rolled to another version")


def load(path: str | Path) -> Scenario:
    """Load and validate a scenario file."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError(f"{path}: no such scenario file")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    data = validate_document(doc, str(path), path.parent)
    return Scenario(name=data["name"], path=str(path), data=data)


def load_catalog(directory: str | Path, tag: str | None = None) -> list[Scenario]:
    """Every scenario in a directory (optionally only those with `tag`), validated, sorted by name."""
    scenarios = [load(p) for p in sorted(Path(directory).glob("*.yaml"))]
    names = [s.name for s in scenarios]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ScenarioError(f"{directory}: scenario names must be unique; repeated: {', '.join(dupes)}")
    if clashes := copier.prefix_clashes((s.name, s.data) for s in scenarios):
        raise ScenarioError(f"{directory}: " + "; ".join(clashes))
    return [s for s in scenarios if tag is None or tag in s.data["tags"]]


RANDOM_FAULTS_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["random"],
                        "properties": {"random": random_faults.SCHEMA}}


def schema_json() -> str:
    """The JSON Schema of scenario files, as published in `scenarios/scenario.schema.json` (`faults`: a
    timeline, or `{random: ...}`)."""
    published = copy.deepcopy(SCHEMA)
    published["properties"]["faults"] = {"anyOf": [SCHEMA["properties"]["faults"], RANDOM_FAULTS_SCHEMA]}
    return json.dumps(published, indent=2) + "\n"
