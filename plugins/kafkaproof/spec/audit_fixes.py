"""The fixes an audit tries for a class that fails: the fixed, documented list (docs/audit.md), as scenario changes.

`FIXES`, in the documented order: replication factor 3; `min.insync.replicas` 2; `acks=all`; idempotence on;
`delivery.timeout.ms` above the longest fault; topics created by hand instead of auto-created. Each applies
only where it changes something (a topic already at RF 3 gets no RF 3) and where the fault can show it (the
delivery timeout not under `leader-outage`, whose outage is defined as that timeout + 10 s). `fix_candidates`
gives, smallest first, every single change that applies (RF 3 only together with min ISR 2 where that can
apply: RF 3 with min ISR 1 passes a short leader outage, followers leave the ISR only after lagging 30 s, so the
matrix cannot show its weakness), then the changes combined in the documented order: the audit runs them in
that order and reports the first with which the class's whole matrix passes.

Pure: no I/O.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .audit_plan import AuditPlan, ReliabilityClass, scenario_name
from .clients import ACKS_ALL, producer_settings

FIXES = {"rf3": "replication factor 3",
         "min-isr-2": "min.insync.replicas 2",
         "acks-all": "acks=all",
         "idempotence": "idempotence on (enable.idempotence=true)",
         "delivery-timeout": "delivery.timeout.ms above the longest fault",
         "create-topic": "the topic created by hand (auto.create.topics.enable=false) instead of auto-created"}
TIMEOUT_MARGIN_S = 30


@dataclass(frozen=True)
class FixCandidate:
    """A change to try: the fixes it combines (keys of `FIXES`), what it changes, and the changed scenario."""

    fixes: tuple[str, ...]
    changes: tuple[str, ...]
    document: dict[str, Any]

    @property
    def name(self) -> str:
        return "+".join(self.fixes)


def _auto(doc: Mapping[str, Any]) -> bool:
    return doc["topic"].get("create") is False


def _rf(doc: Mapping[str, Any]) -> int:
    if _auto(doc):
        return int(doc["cluster"].get("config", {}).get("default.replication.factor", doc["topic"]["replication_factor"]))
    return int(doc["topic"]["replication_factor"])


def _min_isr(doc: Mapping[str, Any]) -> int:
    topic = doc["topic"].get("config", {}).get("min.insync.replicas")
    broker = doc["cluster"].get("config", {}).get("min.insync.replicas", 1)
    return int(broker if _auto(doc) or topic is None else topic)


def _producer(doc: Mapping[str, Any]) -> dict[str, Any]:
    return producer_settings(doc["producers"], 0)


def _timeout_key(doc: Mapping[str, Any]) -> str:
    config = doc["producers"].get("config", {})
    return "message.timeout.ms" if "message.timeout.ms" in config and "delivery.timeout.ms" not in config \
        else "delivery.timeout.ms"


def _fault(doc: Mapping[str, Any]) -> str:
    """The matrix fault a scenario runs (its `fault-<id>` tag), "" for none."""
    return next((t[len("fault-"):] for t in doc.get("tags", []) if t.startswith("fault-")), "")


def _longest_fault_s(doc: Mapping[str, Any]) -> float:
    return max((float(f.get("duration", 0)) for f in doc["faults"]), default=0.0)


def _delivery_timeout_s(doc: Mapping[str, Any]) -> float:
    from .audit_plan import delivery_timeout_ms
    return delivery_timeout_ms(doc["producers"].get("client", "librdkafka"), doc["producers"].get("config", {})) / 1000


# Each fix: (applies to the document?, change it in place and say what changed).
def _rf3(doc: dict[str, Any]) -> str:
    doc["cluster"]["brokers"] = max(3, doc["cluster"]["brokers"])
    if _auto(doc):
        doc["cluster"].setdefault("config", {})["default.replication.factor"] = "3"
        doc["topic"]["replication_factor"] = 3
        return "brokers' default.replication.factor 3 (what an auto-created topic gets)"
    doc["topic"]["replication_factor"] = 3
    return "topic replication factor 3"


def _min_isr2(doc: dict[str, Any]) -> str:
    if _auto(doc):
        doc["cluster"].setdefault("config", {})["min.insync.replicas"] = "2"
        return "brokers' min.insync.replicas 2 (what an auto-created topic gets)"
    doc["topic"].setdefault("config", {})["min.insync.replicas"] = 2
    return "topic min.insync.replicas 2"


def _acks_all(doc: dict[str, Any]) -> str:
    doc["producers"]["config"]["acks"] = "all"
    return "producer acks=all"


def _idempotence(doc: dict[str, Any]) -> str:
    doc["producers"]["config"]["enable.idempotence"] = "true"
    return "producer enable.idempotence=true"


def _delivery_timeout(doc: dict[str, Any]) -> str:
    key = _timeout_key(doc)
    ms = int((_longest_fault_s(doc) + TIMEOUT_MARGIN_S) * 1000)
    doc["producers"]["config"][key] = ms
    return f"producer {key}={ms}"


def _create_topic(doc: dict[str, Any]) -> str:
    doc["topic"]["create"] = True
    doc["cluster"].setdefault("config", {})["auto.create.topics.enable"] = "false"
    config = {k: v for k, v in (("min.insync.replicas", _min_isr(doc)),) if v != 1}
    if config:
        doc["topic"]["config"] = {**doc["topic"].get("config", {}), **config}
    return "topic created by hand, auto.create.topics.enable=false"


APPLIES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "rf3": lambda d: _rf(d) < 3,
    # min ISR 2 on fewer than 3 replicas would refuse every acks=all write while one replica is down
    "min-isr-2": lambda d: _min_isr(d) < 2 and _rf(d) >= 3,
    "acks-all": lambda d: _producer(d)["acks"] != ACKS_ALL,
    # idempotence needs acks=all (the Java client refuses it otherwise)
    "idempotence": lambda d: not _producer(d)["idempotence"] and _producer(d)["acks"] == ACKS_ALL,
    # leader-outage lasts the delivery timeout + 10 s by definition: a longer timeout would pass by construction
    "delivery-timeout": lambda d: _fault(d) != "leader-outage" and _delivery_timeout_s(d) <= _longest_fault_s(d),
    "create-topic": _auto,
}
CHANGE: dict[str, Callable[[dict[str, Any]], str]] = {
    "rf3": _rf3, "min-isr-2": _min_isr2, "acks-all": _acks_all, "idempotence": _idempotence,
    "delivery-timeout": _delivery_timeout, "create-topic": _create_topic}


def apply_fixes(doc: Mapping[str, Any], fixes: tuple[str, ...]) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """Pure: the document with `fixes` applied in turn, and what each changed; None when one does not apply
    to the document as the earlier ones left it."""
    out = copy.deepcopy(dict(doc))
    changes = []
    for fix in fixes:
        if not APPLIES[fix](out):
            return None
        changes.append(CHANGE[fix](out))
    return out, tuple(changes)


def fix_candidates(plan: AuditPlan, cls: ReliabilityClass, doc: Mapping[str, Any]) -> list[FixCandidate]:
    """Pure: the changes to try for class `cls` whose scenario `doc` failed, smallest first: each single fix
    that applies, in the documented order (`rf3` as `rf3+min-isr-2` where min ISR 2 can then apply), then the
    applicable fixes combined cumulatively in that order (two, three, ...). Each candidate's document is `doc`
    changed and renamed `<name>-fix-<fixes>`."""
    del plan  # the plan's settings are in the document; kept in the signature for the caller's symmetry
    chains: list[tuple[str, ...]] = []
    for fix in FIXES:
        if apply_fixes(doc, (fix,)) is None:
            continue
        # RF 3 alone keeps min ISR 1, which a short outage cannot tell from min ISR 2: offered with it
        chains.append(("rf3", "min-isr-2") if fix == "rf3" and apply_fixes(doc, ("rf3", "min-isr-2")) else (fix,))
    chain: tuple[str, ...] = ()
    for fix in FIXES:
        if apply_fixes(doc, chain + (fix,)) is not None:
            chain += (fix,)
            if len(chain) > 1:
                chains.append(chain)
    out: list[FixCandidate] = []
    seen: list[dict[str, Any]] = []
    fault = _fault(doc)
    for fixes in chains:
        applied = apply_fixes(doc, fixes)
        assert applied is not None
        changed, changes = applied
        if changed in seen:
            continue
        seen.append(copy.deepcopy(changed))
        changed["name"] = scenario_name(cls.label, fault, "fix-" + "-".join(fixes))
        changed["description"] = f"{doc.get('description', '')} Fix tried: {'; '.join(changes)}."
        changed["tags"] = [*doc.get("tags", []), "audit-fix"]
        out.append(FixCandidate(fixes=fixes, changes=changes, document=changed))
    return out
