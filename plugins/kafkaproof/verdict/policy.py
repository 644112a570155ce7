"""Verdict policy: which anomalies each delivery guarantee allows, and the suites built from it.

The policy is data (`expectations/policy.yaml`). This module loads and checks it,
judges anomaly counts against it (pure Python), and turns it into Great
Expectations suite specifications (plain dicts in GX's suite JSON format, so they
can be written without importing GX). `python -m kafkaproof.verdict.policy write-suites`
regenerates `expectations/suites/`.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..spec import anomalies
from ..paths import repo_root, share_dir
from ..errors import ScenarioError, ValidationFailed

EXPECTATIONS_DIR = share_dir("expectations")
POLICY_PATH = EXPECTATIONS_DIR / "policy.yaml"
SUITES_DIR = EXPECTATIONS_DIR / "suites"

CLASSES = ("hard", "incomplete", "info", "soft")
GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")
OUTCOMES = ("pass", "detect")

# Value-level kinds and their flag column in analysis/values.parquet (the anomaly vocabulary).
VALUE_FLAGS: dict[str, str] = dict(anomalies.VALUE_FLAGS)
# Anomaly-row columns GX lists for each unexpected row in Data Docs.
INDEX_COLUMNS = ["value_id", "partition", "offset"]


class PolicyError(ValidationFailed):
    """expectations/policy.yaml is malformed or contradicts itself."""


@dataclass(frozen=True)
class Kind:
    """One anomaly kind of the policy."""

    name: str
    cls: str
    summary: str
    allowable: bool = False  # a scenario may accept it with a stated reason (`allow: {kind: reason}`)


@dataclass(frozen=True)
class Expect:
    """A scenario's normalised `expect`: plain pass, or a negative control listing kinds to detect."""

    outcome: str = "pass"
    detect: tuple[str, ...] = ()

    @property
    def is_control(self) -> bool:
        return self.outcome == "detect"


@dataclass(frozen=True)
class Policy:
    """The loaded policy: kinds (in report order), the kinds each guarantee allows, and what each claim forbids."""

    kinds: tuple[Kind, ...]
    allowed_by: Mapping[str, frozenset[str]]
    forbidden_by_claim: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def check_claims(self, claims: Sequence[str]) -> None:
        unknown = sorted(set(claims) - set(self.forbidden_by_claim))
        if unknown:
            raise ScenarioError(f"scenario.claims: unknown claim(s) {', '.join(unknown)}; "
                                f"allowed: {', '.join(self.forbidden_by_claim) or 'none'}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kinds)

    def kind(self, name: str) -> Kind:
        for k in self.kinds:
            if k.name == name:
                return k
        raise PolicyError(f"anomaly kind {name!r} is not in {POLICY_PATH}")

    def check_guarantee(self, guarantee: str) -> None:
        if guarantee not in self.allowed_by:
            raise ScenarioError(f"scenario.guarantee={guarantee!r}; expected one of {', '.join(self.allowed_by)}")

    def allowed(self, guarantee: str) -> frozenset[str]:
        """Kinds that do not fail a run of this guarantee (allowed soft kinds plus info kinds)."""
        self.check_guarantee(guarantee)
        return self.allowed_by[guarantee] | {k.name for k in self.kinds if k.cls == "info"}

    def forbidden(self, guarantee: str, claims: Sequence[str] = (), allow: Mapping[str, str] | None = None
                  ) -> tuple[str, ...]:
        """Kinds whose non-zero count fails a run of this guarantee (hard, and soft not allowed) and claims;
        the kinds the scenario accepts with a reason (`allow`, checked) are not."""
        self.check_claims(claims)
        allowed = self.allowed(guarantee) - {k for c in claims for k in self.forbidden_by_claim[c]}
        allowed |= set(allow or {})
        return tuple(k.name for k in self.kinds if k.cls in ("hard", "soft") and k.name not in allowed)

    @property
    def allowable(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kinds if k.allowable)

    def check_allow(self, allow: Any, where: str = "scenario") -> dict[str, str]:
        """A scenario's `allow: {kind: reason}`, checked: each kind allowable with a reason, each reason stated.
        Raises ScenarioError naming `where` (the file) and the field."""
        for name, why in anomalies.allow_errors(allow, self.allowable)[:1]:
            raise ScenarioError(f"{where}: {name}: {why}")
        return {str(k): str(v).strip() for k, v in (allow or {}).items()}

    @property
    def incomplete(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kinds if k.cls == "incomplete")


def load_policy(path: Path = POLICY_PATH) -> Policy:
    """Load and check the policy file."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError as exc:
        raise PolicyError(f"{path}: policy file missing") from exc
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML: {exc}") from exc
    return parse_policy(raw, str(path))


def parse_policy(raw: Any, where: str = "policy") -> Policy:
    """Build a Policy from its YAML structure, refusing contradictions."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("kinds"), Mapping):
        raise PolicyError(f"{where}: needs a `kinds` mapping")
    kinds = []
    for name, info in raw["kinds"].items():
        cls = (info or {}).get("class")
        if cls not in CLASSES:
            raise PolicyError(f"{where}: kinds.{name}.class={cls!r}; expected one of {', '.join(CLASSES)}")
        allowable = bool((info or {}).get("allowable_with_reason", False))
        if allowable and cls != "soft":
            raise PolicyError(f"{where}: kinds.{name}.allowable_with_reason needs class soft, not {cls}")
        kinds.append(Kind(str(name), cls, str((info or {}).get("summary", "")), allowable))
    by_name = {k.name: k for k in kinds}
    guarantees = raw.get("guarantees") or {}
    allowed_by: dict[str, frozenset[str]] = {}
    for g in GUARANTEES:
        if g not in guarantees:
            raise PolicyError(f"{where}: guarantees.{g} missing")
    for g, spec in guarantees.items():
        allowed = frozenset((spec or {}).get("allowed") or [])
        for name in sorted(allowed):
            if name not in by_name:
                raise PolicyError(f"{where}: guarantees.{g}.allowed lists unknown kind {name!r}")
            if by_name[name].cls != "soft":
                raise PolicyError(f"{where}: guarantees.{g}.allowed lists {name!r}, a {by_name[name].cls} kind; "
                                  "only soft kinds can be allowed")
        allowed_by[str(g)] = allowed
    forbidden_by_claim: dict[str, frozenset[str]] = {}
    for claim, spec in (raw.get("claims") or {}).items():
        forbids = frozenset((spec or {}).get("forbids") or [])
        for name in sorted(forbids):
            if name not in by_name or by_name[name].cls != "soft":
                raise PolicyError(f"{where}: claims.{claim}.forbids lists {name!r}, which is not a soft kind")
        forbidden_by_claim[str(claim)] = forbids
    return Policy(tuple(kinds), allowed_by, forbidden_by_claim)


def normalize_expect(expect: Any, policy: Policy) -> Expect:
    """Accept the scenario's `expect` ({'outcome', 'detect'}; a bare string or list also works)."""
    if expect is None:
        return Expect()
    if isinstance(expect, str):
        expect = {"outcome": expect}
    elif isinstance(expect, (list, tuple)):
        expect = {"outcome": "detect", "detect": list(expect)}
    if not isinstance(expect, Mapping):
        raise ScenarioError(f"scenario.expect={expect!r}; expected {{outcome: pass|detect, detect: [...]}}")
    # A scenario file writes a negative control as {detect: [...], why: ...} without an outcome.
    outcome = str(expect.get("outcome", "detect" if expect.get("detect") else "pass"))
    detect = tuple(expect.get("detect") or ())
    if outcome not in OUTCOMES:
        raise ScenarioError(f"scenario.expect.outcome={outcome!r}; expected pass or detect")
    if outcome == "detect" and not detect:
        raise ScenarioError("scenario.expect.outcome=detect needs a non-empty detect list")
    if outcome == "pass" and detect:
        raise ScenarioError("scenario.expect.detect is only meaningful with outcome: detect")
    for name in detect:
        if name not in policy.names:
            raise ScenarioError(f"scenario.expect.detect lists unknown anomaly {name!r}; known: {', '.join(policy.names)}")
    return Expect(outcome, detect)


@dataclass(frozen=True)
class Judgement:
    """The policy's reading of one anomaly count."""

    anomaly: str
    count: int
    allowed: bool            # the guarantee (and claims) allow it, or a negative control must detect it
    expected_detected: bool  # a negative control requires count > 0
    ok: bool                 # this row does not fail the run
    allowed_reason: str | None = None  # allowable_with_reason: the scenario's stated reason for accepting it

    @property
    def also_found(self) -> bool:
        """Found in a negative control outside its `detect` list though the guarantee forbids it: it does not
        decide the control, and is reported as "also found (forbidden by the guarantee)", never as allowed."""
        return self.ok and not self.allowed and self.count > 0


def judge(counts: Mapping[str, int], policy: Policy, guarantee: str, expect: Expect,
          claims: Sequence[str] = (), allow: Mapping[str, str] | None = None) -> list[Judgement]:
    """Per-kind verdict rows. In a negative control only the listed kinds decide (and unseen); the others
    keep `allowed` as the guarantee has it, so a forbidden one found there reads as `also_found`. A kind the
    scenario `allow`s (checked with `Policy.check_allow`) is allowed with its reason."""
    allow = allow or {}
    forbidden = set(policy.forbidden(guarantee, claims, allow))
    unforbidden = set(policy.forbidden(guarantee, claims)) - forbidden  # forbidden but for the scenario's reason
    rows = []
    for name in policy.names:
        n = int(counts.get(name, 0) or 0)
        cls = policy.kind(name).cls
        wanted = name in expect.detect
        if cls == "incomplete":
            allowed, ok = False, n == 0
        elif expect.is_control:
            allowed, ok = wanted or name not in forbidden, (n > 0) if wanted else True
        else:
            allowed = name not in forbidden
            ok = allowed or n == 0
        reason = allow[name] if name in unforbidden else None
        rows.append(Judgement(name, n, allowed, wanted, ok, reason))
    return rows


# --------------------------------------------------------------------------- suites

def suite_name(frame: str, guarantee: str, expect: Expect, claims: Sequence[str] = ()) -> str:
    """kafkaproof.<frame>.<guarantee>[+<claim>...], or ...detect-<kinds> for a negative control."""
    tail = guarantee if not expect.is_control else "detect-" + "+".join(expect.detect)
    return f"kafkaproof.{frame}.{tail}" + "".join(f"+{c}" for c in sorted(claims))


def _exp(type_: str, meta: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    return {"type": type_, "kwargs": kwargs, "meta": dict(meta)}


def counts_suite(policy: Policy, guarantee: str, expect: Expect, claims: Sequence[str] = (),
                 allow: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Suite over the one-row counts frame (one column per kind): the verdict itself."""
    allow = allow or {}
    forbidden = set(policy.forbidden(guarantee, claims, allow))
    what = guarantee + "".join(f" + claim {c}" for c in sorted(claims))
    exps = []
    for k in policy.kinds:
        meta = {"anomaly": k.name, "class": k.cls, "summary": k.summary}
        if k.cls == "incomplete":
            exps.append(_exp("expect_column_values_to_be_between", {**meta, "rule": "must be 0: otherwise the run is incomplete"},
                             column=k.name, min_value=0, max_value=0))
        elif expect.is_control and k.name in expect.detect:
            exps.append(_exp("expect_column_values_to_be_between", {**meta, "rule": "negative control: must be detected"},
                             column=k.name, min_value=1))
        elif not expect.is_control and k.name in forbidden:
            exps.append(_exp("expect_column_values_to_be_between", {**meta, "rule": f"forbidden by {what}"},
                             column=k.name, min_value=0, max_value=0))
        else:
            if expect.is_control and k.name in forbidden:
                why = f"forbidden by {what}, not decisive in a negative control: reported as also found"
            elif expect.is_control:
                why = "not decisive in a negative control"
            elif k.name in allow:
                why = f"allowable_with_reason: {allow[k.name]}"
            else:
                why = "informational" if k.cls == "info" else f"allowed by {what}"
            exps.append(_exp("expect_column_values_to_be_between", {**meta, "rule": why}, column=k.name, min_value=0))
    meta = {"guarantee": guarantee, "expect": {"outcome": expect.outcome, "detect": list(expect.detect)},
            "generated_from": "expectations/policy.yaml"}
    if claims:
        meta["claims"] = sorted(claims)
    return {"name": suite_name("counts", guarantee, expect, claims), "expectations": exps, "meta": meta,
            "notes": None}


def anomalies_suite(policy: Policy, guarantee: str, expect: Expect, claims: Sequence[str] = (),
                    allow: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Suite over anomalies.parquet rows: every row's kind must be tolerated (Data Docs list the offenders)."""
    if expect.is_control:
        exps = [_exp("expect_column_distinct_values_to_contain_set", {"rule": "negative control: each listed kind found"},
                     column="kind", value_set=sorted(expect.detect))]
    else:
        forbidden = set(policy.forbidden(guarantee, claims, allow))
        ok_kinds = sorted(k for k in policy.names if k not in forbidden and policy.kind(k).cls != "incomplete")
        what = guarantee + "".join(f" + claim {c}" for c in sorted(claims))
        exps = [_exp("expect_column_values_to_be_in_set", {"rule": f"kinds tolerated by {what}"},
                     column="kind", value_set=ok_kinds)]
    exps.append(_exp("expect_column_values_to_be_in_set", {"rule": "known anomaly kinds"},
                     column="kind", value_set=sorted(policy.names)))
    return {"name": suite_name("anomalies", guarantee, expect, claims), "expectations": exps,
            "meta": {"guarantee": guarantee, "generated_from": "expectations/policy.yaml"}, "notes": None}


def values_suite(policy: Policy, guarantee: str, expect: Expect, claims: Sequence[str] = (),
                 allow: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Suite over values.parquet: structure, plus one flag check per forbidden value-level kind."""
    exps = [
        _exp("expect_column_values_to_not_be_null", {"rule": "every value has an id"}, column="value_id"),
        _exp("expect_column_values_to_be_unique", {"rule": "one row per value"}, column="value_id"),
        _exp("expect_column_values_to_be_in_set", {"rule": "ledger outcomes (null: never sent)"},
             column="outcome", value_set=["ok", "fail", "indefinite"]),
        _exp("expect_column_values_to_be_between", {"rule": "counts are non-negative"}, column="log_count", min_value=0),
    ]
    if not expect.is_control:
        for name in policy.forbidden(guarantee, claims, allow) + policy.incomplete:
            if name in VALUE_FLAGS:
                exps.append(_exp("expect_column_values_to_be_in_set",
                                 {"anomaly": name, "rule": f"forbidden by {guarantee}"},
                                 column=VALUE_FLAGS[name], value_set=[False]))
    return {"name": suite_name("values", guarantee, expect, claims), "expectations": exps,
            "meta": {"guarantee": guarantee, "generated_from": "expectations/policy.yaml"}, "notes": None}


SUITE_BUILDERS = {"counts": counts_suite, "anomalies": anomalies_suite, "values": values_suite}


def suites(policy: Policy, guarantee: str, expect: Expect, claims: Sequence[str] = (),
           allow: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """frame name -> suite spec, for one scenario (`allow`: the kinds it accepts with a reason)."""
    return {frame: build(policy, guarantee, expect, claims, allow) for frame, build in SUITE_BUILDERS.items()}


def write_suites(policy: Policy, out_dir: Path = SUITES_DIR) -> list[Path]:
    """Write the suites of every guarantee (plain-pass scenarios) as GX suite JSON files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for g in GUARANTEES:
        for spec in suites(policy, g, Expect()).values():
            path = out_dir / f"{spec['name']}.json"
            path.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: `write-suites` regenerates expectations/suites/; `check` reports drift."""
    parser = argparse.ArgumentParser(prog="python -m kafkaproof.verdict.policy")
    parser.add_argument("command", choices=["write-suites", "check"])
    args = parser.parse_args(argv)
    policy = load_policy()
    if args.command == "write-suites":
        if repo_root() is None:  # the suites are sources of the checkout; an installed copy is read only
            print(f"write-suites regenerates a checkout's expectations/suites/; this kafkaproof is installed "
                  f"({SUITES_DIR}): run it from a checkout", file=sys.stderr)
            return 2
        for p in write_suites(policy):
            print(p)
        return 0
    stale = [g for g in GUARANTEES for spec in suites(policy, g, Expect()).values()
             if not (SUITES_DIR / f"{spec['name']}.json").exists()
             or json.loads((SUITES_DIR / f"{spec['name']}.json").read_text()) != spec]
    if stale:
        print(f"suites out of date for {sorted(set(stale))}: run python -m kafkaproof.verdict.policy write-suites", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
