"""Fault rules: their JSON form, validation, matching and run-time state.

A rule is a flat JSON object (see docs/proxy.md). :func:`parse_rule` validates
it into a :class:`Rule`; :meth:`Rule.as_json` gives the normalised form back.
Matching is split in two so that the common case stays cheap: the header-level
filters (:meth:`Rule.matches_header`) need only what the proxy peeks from every
request; the topic/partition filter (:meth:`Rule.matches_targets`) needs the
decoded body and is evaluated only for rules that survive the first step.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import RuleError
from .protocol import ERROR_APIS, FETCH, FILTERABLE_APIS, METADATA, PRODUCE, TopicPartitions, api_key_of, api_name, error_code_of
from .responses import CORRUPT, DUPLICATE, METADATA_MODES, STALE

LOST_ACK = "lost_ack"
ERROR = "error"
LATENCY = "latency"
BANDWIDTH = "bandwidth"
RESET = "reset"
BLACKHOLE = "blackhole"
METADATA_FAULT = "metadata"
HOLD = "hold"
ACTIONS = (LOST_ACK, ERROR, LATENCY, BANDWIDTH, RESET, BLACKHOLE, METADATA_FAULT, CORRUPT, DUPLICATE, HOLD)

#: Actions that alter the broker's answer on its way back, and the one API each acts on. Their
#: `topic`/`partitions` filters select partitions of the answer, not of the request.
RESPONSE_ACTIONS = {METADATA_FAULT: METADATA, CORRUPT: FETCH, DUPLICATE: FETCH}

#: Actions that decide the fate of a request; at most one of them applies to a request.
DISPOSITIONS = frozenset({LOST_ACK, ERROR, RESET, BLACKHOLE, HOLD})

REQUEST = "request"
RESPONSE = "response"
BOTH = "both"
DIRECTIONS = (REQUEST, RESPONSE, BOTH)

FIXED = "fixed"
UNIFORM = "uniform"
NORMAL = "normal"
DISTRIBUTIONS = (FIXED, UNIFORM, NORMAL)

_COMMON_KEYS = {
    "id", "action", "broker", "proxy", "api", "topic", "partitions", "client_id",
    "probability", "every", "count", "start_after_s", "duration_s",
}
_ACTION_KEYS = {
    LOST_ACK: {"reset"},
    ERROR: {"error", "forward"},
    LATENCY: {"direction", "dist", "ms", "min_ms", "max_ms", "mean_ms", "stddev_ms"},
    BANDWIDTH: {"direction", "bytes_per_s"},
    RESET: {"direction", "after_bytes"},
    BLACKHOLE: set(),
    METADATA_FAULT: {"mode"},
    CORRUPT: set(),
    DUPLICATE: set(),
    HOLD: {"ms", "transactional"},
}


@dataclasses.dataclass(frozen=True, slots=True)
class Latency:
    """A delay distribution in milliseconds: fixed ``a``; uniform in [a, b]; normal(mean a, stddev b) clipped at 0."""

    dist: str
    a: float
    b: float = 0.0

    def sample_s(self, rng: random.Random) -> float:
        """Draw one delay, in seconds."""
        if self.dist == UNIFORM:
            ms = rng.uniform(self.a, self.b)
        elif self.dist == NORMAL:
            ms = rng.gauss(self.a, self.b)
        else:
            ms = self.a
        return max(ms, 0.0) / 1000.0

    def as_json(self) -> dict[str, Any]:
        """The rule fields that describe this distribution."""
        if self.dist == UNIFORM:
            return {"dist": UNIFORM, "min_ms": self.a, "max_ms": self.b}
        if self.dist == NORMAL:
            return {"dist": NORMAL, "mean_ms": self.a, "stddev_ms": self.b}
        return {"dist": FIXED, "ms": self.a}


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A validated fault rule. Build one with :func:`parse_rule`."""

    action: str
    id: str = ""
    broker: int | None = None
    proxy: str | None = None
    api: frozenset[int] | None = None
    topic: str | None = None
    partitions: frozenset[int] | None = None
    client_id: str | None = None
    probability: float = 1.0
    every: int | None = None
    count: int | None = None
    start_after_s: float = 0.0
    duration_s: float | None = None
    reset: bool = False
    error: int | None = None
    forward: bool = False
    direction: str = RESPONSE
    latency: Latency | None = None
    bytes_per_s: float | None = None
    after_bytes: int | None = None
    mode: str | None = None
    hold_ms: float | None = None
    transactional: bool = True
    # Answers of other APIs the rule also alters (a stale metadata rule: Produce and Fetch, whose error
    # answers carry leader hints); derived from the action and mode, never written.
    also_apis: frozenset[int] = frozenset()

    @property
    def needs_targets(self) -> bool:
        """Whether matching needs the request's topics/partitions (a decoded body)."""
        return (self.topic is not None or self.partitions is not None) and self.action not in RESPONSE_ACTIONS

    @property
    def alters_response(self) -> bool:
        """Whether the rule rewrites the broker's answer (metadata, corrupt, duplicate)."""
        return self.action in RESPONSE_ACTIONS

    @property
    def is_disposition(self) -> bool:
        """Whether the rule decides the fate of the request (vs. shaping its timing)."""
        return self.action in DISPOSITIONS and not (self.action == RESET and self.after_bytes is not None)

    def matches_header(self, broker: int | None, proxy: str, api_key: int, client_id: str | None) -> bool:
        """Filters that need only the peeked request header and the listener identity."""
        if self.api is not None and api_key not in self.api and api_key not in self.also_apis:
            return False
        if self.broker is not None and broker != self.broker:
            return False
        if self.proxy is not None and proxy != self.proxy:
            return False
        if self.client_id is not None and not fnmatch.fnmatchcase(client_id or "", self.client_id):
            return False
        return True

    def matches_targets(self, targets: Iterable[TopicPartitions] | None) -> bool:
        """Topic/partition filter; ``targets`` None means the body could not be decoded (no match)."""
        if not self.needs_targets:
            return True
        if targets is None:
            return False
        for target in targets:
            if self.topic is not None and self.topic not in (target.topic, target.topic_id):
                continue
            if self.partitions is None or not self.partitions.isdisjoint(target.partitions):
                return True
        return False

    def matches_partition(self, topic: str | None, topic_id: Any, partition: int) -> bool:
        """Topic/partition filter on one partition of an answer (rules that alter answers)."""
        if self.topic is not None and self.topic not in (topic, topic_id, str(topic_id)):
            return False
        return self.partitions is None or partition in self.partitions

    def as_json(self) -> dict[str, Any]:
        """Normalised JSON form (what `rules`/`stats` report and what :func:`parse_rule` accepts)."""
        out: dict[str, Any] = {"id": self.id, "action": self.action}
        for key in ("broker", "proxy", "topic", "client_id", "every", "count", "duration_s"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.api is not None:
            out["api"] = sorted(api_name(k) for k in self.api)
        if self.partitions is not None:
            out["partitions"] = sorted(self.partitions)
        if self.probability != 1.0:
            out["probability"] = self.probability
        if self.start_after_s:
            out["start_after_s"] = self.start_after_s
        if self.action == LOST_ACK:
            out["reset"] = self.reset
        elif self.action == ERROR:
            out["error"] = self.error
            out["forward"] = self.forward
        elif self.action == LATENCY:
            out["direction"] = self.direction
            out.update(self.latency.as_json() if self.latency else {})
        elif self.action == BANDWIDTH:
            out["direction"] = self.direction
            out["bytes_per_s"] = self.bytes_per_s
        elif self.action == RESET:
            out["direction"] = self.direction
            if self.after_bytes is not None:
                out["after_bytes"] = self.after_bytes
        elif self.action == METADATA_FAULT:
            out["mode"] = self.mode
        elif self.action == HOLD:
            out["ms"] = self.hold_ms
            out["transactional"] = self.transactional
        return out


def parse_rule(spec: Mapping[str, Any] | Rule) -> Rule:
    """Validate a rule given as a JSON object; raises :class:`RuleError` naming the bad field."""
    if isinstance(spec, Rule):
        return spec
    if not isinstance(spec, Mapping):
        raise RuleError(f"a rule is a JSON object, not {type(spec).__name__}")
    action = spec.get("action")
    if action not in ACTIONS:
        raise RuleError(f"rule field 'action' must be one of {', '.join(ACTIONS)}; got {action!r}")
    unknown = set(spec) - _COMMON_KEYS - _ACTION_KEYS[action]
    if unknown:
        raise RuleError(f"unknown field(s) for a {action} rule: {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {"action": action, "id": str(spec.get("id") or "")}
    fields["broker"] = _opt_int(spec, "broker")
    fields["proxy"] = _opt_str(spec, "proxy")
    fields["api"] = _apis(spec.get("api"))
    if action in RESPONSE_ACTIONS:
        fields["api"] = _response_api(action, fields["api"])
    if action == HOLD:
        if fields["api"] is not None and fields["api"] != {PRODUCE}:
            raise RuleError("rule field 'api': a hold rule holds Produce requests only; give api 'produce' or "
                            "leave it out")
        fields["api"] = frozenset({PRODUCE})
    fields["topic"] = _opt_str(spec, "topic")
    fields["partitions"] = _partitions(spec.get("partitions"))
    fields["client_id"] = _opt_str(spec, "client_id")
    fields["probability"] = _number(spec, "probability", 1.0, low=0.0, high=1.0)
    fields["every"] = _opt_int(spec, "every", low=1)
    if fields["every"] is not None and "probability" in spec:
        raise RuleError("rule fields 'every' and 'probability' exclude each other: 'every' N affects each N-th "
                        "matching request (deterministic), 'probability' draws at random")
    fields["count"] = _opt_int(spec, "count", low=1)
    fields["start_after_s"] = _number(spec, "start_after_s", 0.0, low=0.0)
    duration = spec.get("duration_s")
    fields["duration_s"] = None if duration is None else _number(spec, "duration_s", 0.0, low=0.0)
    fields.update(_action_fields(action, spec, fields["api"]))
    if (fields["topic"] is not None or fields["partitions"] is not None) and action not in RESPONSE_ACTIONS:
        if fields["api"] is None or not fields["api"] <= FILTERABLE_APIS:
            raise RuleError("rule fields 'topic'/'partitions' need 'api' limited to "
                            + ", ".join(sorted(api_name(k) for k in FILTERABLE_APIS)))
    return Rule(**fields)


def _action_fields(action: str, spec: Mapping[str, Any], apis: frozenset[int] | None) -> dict[str, Any]:
    if action == LOST_ACK:
        return {"reset": _bool(spec, "reset", False)}
    if action == ERROR:
        if apis is None or not apis <= ERROR_APIS:
            raise RuleError("an error rule needs 'api' limited to APIs whose answers it can build: "
                            + ", ".join(sorted(api_name(k) for k in ERROR_APIS)))
        if "error" not in spec:
            raise RuleError("an error rule needs 'error' (a Kafka error code or name)")
        try:
            code = int(error_code_of(spec["error"]))
        except ValueError as exc:
            raise RuleError(f"rule field 'error': {exc}") from None
        if code == 0:
            raise RuleError("rule field 'error' must not be NONE (0)")
        return {"error": code, "forward": _bool(spec, "forward", False)}
    if action == LATENCY:
        return {"direction": _direction(spec, RESPONSE), "latency": _latency(spec)}
    if action == BANDWIDTH:
        rate = _number(spec, "bytes_per_s", None, low=1.0)
        return {"direction": _direction(spec, BOTH), "bytes_per_s": rate}
    if action == RESET:
        return {"direction": _direction(spec, BOTH), "after_bytes": _opt_int(spec, "after_bytes", low=0)}
    if action == METADATA_FAULT:
        mode = spec.get("mode")
        if mode not in METADATA_MODES:
            raise RuleError(f"rule field 'mode' of a metadata rule must be one of {', '.join(METADATA_MODES)} "
                            f"(missing: no leader; stale: another replica named leader); got {mode!r}")
        return {"mode": mode, "also_apis": frozenset({PRODUCE, FETCH}) if mode == STALE else frozenset()}
    if action == HOLD:
        return {"hold_ms": _number(spec, "ms", None, low=1.0), "transactional": _bool(spec, "transactional", True)}
    return {}


def _response_api(action: str, apis: frozenset[int] | None) -> frozenset[int]:
    """The one API a rule that alters answers acts on; 'api' may name it, nothing else."""
    only = RESPONSE_ACTIONS[action]
    if apis is not None and apis != {only}:
        raise RuleError(f"rule field 'api': a {action} rule alters {api_name(only)} answers only; "
                        f"give api {api_name(only)!r} or leave it out; got {sorted(api_name(k) for k in apis)}")
    return frozenset({only})


def _latency(spec: Mapping[str, Any]) -> Latency:
    dist = spec.get("dist")
    if dist is None:
        dist = UNIFORM if "min_ms" in spec else NORMAL if "mean_ms" in spec else FIXED
    if dist == FIXED:
        return Latency(FIXED, _number(spec, "ms", None, low=0.0))
    if dist == UNIFORM:
        low = _number(spec, "min_ms", None, low=0.0)
        high = _number(spec, "max_ms", None, low=low)
        return Latency(UNIFORM, low, high)
    if dist == NORMAL:
        return Latency(NORMAL, _number(spec, "mean_ms", None, low=0.0), _number(spec, "stddev_ms", 0.0, low=0.0))
    raise RuleError(f"rule field 'dist' must be one of {', '.join(DISTRIBUTIONS)}; got {dist!r}")


def _direction(spec: Mapping[str, Any], default: str) -> str:
    value = spec.get("direction", default)
    if value not in DIRECTIONS:
        raise RuleError(f"rule field 'direction' must be one of {', '.join(DIRECTIONS)}; got {value!r}")
    return value


def _apis(value: Any) -> frozenset[int] | None:
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    try:
        return frozenset(api_key_of(v) for v in items)
    except ValueError as exc:
        raise RuleError(f"rule field 'api': {exc}") from None


def _partitions(value: Any) -> frozenset[int] | None:
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in items):
        raise RuleError(f"rule field 'partitions' must be a list of partition numbers; got {value!r}")
    return frozenset(items)


def _opt_str(spec: Mapping[str, Any], key: str) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RuleError(f"rule field {key!r} must be a non-empty string; got {value!r}")
    return value


def _opt_int(spec: Mapping[str, Any], key: str, low: int | None = None) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        raise RuleError(f"rule field {key!r} must be an integer{bound}; got {value!r}")
    return value


def _bool(spec: Mapping[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise RuleError(f"rule field {key!r} must be true or false; got {value!r}")
    return value


def _number(spec: Mapping[str, Any], key: str, default: float | None,
            low: float | None = None, high: float | None = None) -> float:
    value = spec.get(key, default)
    if value is None:
        raise RuleError(f"rule field {key!r} is required for a {spec.get('action')} rule")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RuleError(f"rule field {key!r} must be a number; got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise RuleError(f"rule field {key!r} must be in [{low}, {high if high is not None else 'inf'}]; got {value!r}")
    return float(value)


@dataclasses.dataclass(slots=True)
class RuleState:
    """Run-time state of an installed rule: its window and how often it fired."""

    rule: Rule
    added_at: float
    fired: int = 0
    matched: int = 0
    expired: bool = False

    def window(self) -> tuple[float, float]:
        """(start, end) of the active window, in the proxy's monotonic seconds."""
        start = self.added_at + self.rule.start_after_s
        end = math.inf if self.rule.duration_s is None else start + self.rule.duration_s
        return start, end

    def active(self, now: float) -> bool:
        """Whether the rule may fire at ``now`` (inside its window and count not exhausted)."""
        if self.expired:
            return False
        start, end = self.window()
        return start <= now < end

    def is_over(self, now: float) -> bool:
        """Whether the rule can never fire again."""
        return self.expired or now >= self.window()[1]

    def roll(self, rng: random.Random) -> bool:
        """Whether the rule affects one matching request: each `every`-th one, else by its probability."""
        self.matched += 1
        if self.rule.every is not None:
            return self.matched % self.rule.every == 0
        return self.rule.probability >= 1.0 or rng.random() < self.rule.probability

    def fire(self) -> bool:
        """Count one application; False (and nothing counted) if the count is used up."""
        if self.expired:
            return False
        self.fired += 1
        if self.rule.count is not None and self.fired >= self.rule.count:
            self.expired = True
        return True

    def as_json(self, now: float) -> dict[str, Any]:
        """Rule plus state, for `rules`/`stats`."""
        state = "expired" if self.is_over(now) else "active" if self.active(now) else "waiting"
        return {**self.rule.as_json(), "state": state, "fired": self.fired, "matched": self.matched}


class Pacer:
    """A shared byte-rate limit: each frame is scheduled after the previous one has "drained".

    Frames are never split, so a frame larger than one second's budget still goes
    out whole and pushes the next frame further back.
    """

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = bytes_per_s
        self._next_free = 0.0

    def reserve(self, size: int, now: float) -> float:
        """Book ``size`` bytes; returns the time (same clock as ``now``) at which they may be sent."""
        start = max(now, self._next_free)
        self._next_free = start + size / self.bytes_per_s
        return start
