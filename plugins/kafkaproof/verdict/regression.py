"""Regression rules with a statistical footing: a run against the comparable runs of its history.

Pure functions over key metrics (`history.key_metrics`); the policy is data
(`expectations/regression.yaml`, overridable by environment variables). What fails the gate
(`Finding.severity == "fail"`) is kept apart from what only warns: drift on a thin baseline,
a metric unstable at the run's sample size, an allowed anomaly kind new to the baseline.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..errors import ValidationFailed
from ..paths import share_dir

REGRESSION_PATH = share_dir("expectations") / "regression.yaml"
MAD_TO_SIGMA = 1.4826  # a normal distribution's sigma from its median absolute deviation
SAMPLES_KEY = "publish_samples"


class RegressionPolicyError(ValidationFailed):
    """expectations/regression.yaml is malformed."""


@dataclass(frozen=True)
class MetricRule:
    """How one trended metric is judged."""

    name: str
    k: float = 4.0
    relative: float = 0.5
    absolute: float = 0.0
    gate: bool = True
    min_samples: int = 0


@dataclass(frozen=True)
class RegressionPolicy:
    """The loaded regression policy."""

    min_runs: int = 5
    window: int = 20
    metrics: tuple[MetricRule, ...] = ()
    count_k: float = 4.0
    count_relative: float = 1.0
    count_absolute: float = 10.0

    @classmethod
    def load(cls, path: Path = REGRESSION_PATH, env: Mapping[str, str] | None = None) -> "RegressionPolicy":
        """Read the policy file, then apply `KAFKAPROOF_REGRESSION_MIN_RUNS`, `_WINDOW`, `_TOLERANCE`
        (relative margin of every metric) and `_MIN_ABSOLUTE` (JSON: absolute margin by metric)."""
        env = os.environ if env is None else env
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise RegressionPolicyError(f"{path}: cannot read the regression policy: {e}") from e
        base = raw.get("baseline") or {}
        counts = raw.get("anomaly_counts") or {}
        rules = []
        for name, spec in (raw.get("metrics") or {}).items():
            unknown = set(spec or {}) - {"k", "relative", "absolute", "gate", "min_samples"}
            if unknown:
                raise RegressionPolicyError(f"{path}: metrics.{name}: unknown field(s) {sorted(unknown)}; "
                                            f"allowed: k, relative, absolute, gate, min_samples")
            rules.append(MetricRule(str(name), **(spec or {})))
        policy = cls(int(base.get("min_runs", 5)), int(base.get("window", 20)), tuple(rules),
                     float(counts.get("k", 4)), float(counts.get("relative", 1.0)), float(counts.get("absolute", 10)))
        return policy.with_env(env)

    def with_env(self, env: Mapping[str, str]) -> "RegressionPolicy":
        """The policy with the environment's overrides applied."""
        from dataclasses import replace
        policy = self
        if env.get("KAFKAPROOF_REGRESSION_MIN_RUNS"):
            policy = replace(policy, min_runs=int(env["KAFKAPROOF_REGRESSION_MIN_RUNS"]))
        if env.get("KAFKAPROOF_REGRESSION_WINDOW"):
            policy = replace(policy, window=int(env["KAFKAPROOF_REGRESSION_WINDOW"]))
        rules = list(policy.metrics)
        if env.get("KAFKAPROOF_REGRESSION_TOLERANCE"):
            rules = [replace(r, relative=float(env["KAFKAPROOF_REGRESSION_TOLERANCE"])) for r in rules]
        if env.get("KAFKAPROOF_REGRESSION_MIN_ABSOLUTE"):
            margins = json.loads(env["KAFKAPROOF_REGRESSION_MIN_ABSOLUTE"])
            rules = [replace(r, absolute=float(margins[r.name])) if r.name in margins else r for r in rules]
        return replace(policy, metrics=tuple(rules))

    def rule(self, name: str) -> MetricRule:
        for r in self.metrics:
            if r.name == name:
                return r
        raise KeyError(name)


@dataclass
class Finding:
    """One thing the history comparison found."""

    scenario: str
    kind: str      # a metric name, or an anomaly kind
    message: str
    severity: str  # fail | warn


@dataclass
class HistoryJudgement:
    """A run against its baseline: what fails the gate, what warns, and how much baseline there was."""

    regressions: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    baseline_runs: int = 0
    baseline_needed: int = 5

    @property
    def baseline_text(self) -> str:
        if self.baseline_runs >= self.baseline_needed:
            return f"baseline: {self.baseline_runs} comparable runs"
        return (f"baseline: {self.baseline_runs} of {self.baseline_needed} runs "
                f"(no regression verdict until {self.baseline_needed})")

    def to_json(self) -> dict[str, Any]:
        return {"regressions": [asdict(f) for f in self.regressions], "warnings": [asdict(f) for f in self.warnings],
                "baseline_runs": self.baseline_runs, "baseline_needed": self.baseline_needed}


def robust_band(values: Sequence[float], k: float, relative: float, absolute: float) -> tuple[float, float]:
    """Pure: (median, upper limit) = median + max(k * 1.4826 * MAD, relative * |median|, absolute)."""
    med = statistics.median(values)
    sigma = MAD_TO_SIGMA * statistics.median([abs(v - med) for v in values])
    return med, med + max(k * sigma, relative * abs(med), absolute)


def count_band(values: Sequence[int], policy: RegressionPolicy) -> tuple[float, float]:
    """Pure: (median, limit) of an allowed anomaly kind's count over the baseline (zeros included)."""
    med, robust = robust_band(values, policy.count_k, 0.0, 0.0)
    return med, max(max(values) * (1 + policy.count_relative), robust) + policy.count_absolute


def metric_gates(rule: MetricRule, samples: int | None) -> tuple[bool, str]:
    """Pure: whether a metric beyond its limit fails the run, and why not when it only warns: the
    metric gates, and the run has the samples (sends) it needs to be stable (`min_samples`)."""
    stable = rule.min_samples == 0 or (samples is not None and samples >= rule.min_samples)
    why = ("" if stable else f"; {samples} samples, too few for this metric (it gates from {rule.min_samples})") + \
          ("" if rule.gate else "; this metric never gates")
    return stable and rule.gate, why


def judge_history(scenario: str, current: Mapping[str, Any], baseline: Sequence[Mapping[str, Any]],
                  policy: RegressionPolicy) -> HistoryJudgement:
    """Pure: compare one passing run's key metrics with its comparable passing runs (newest first)."""
    window = list(baseline)[: policy.window]
    out = HistoryJudgement(baseline_runs=len(window), baseline_needed=policy.min_runs)
    enough = len(window) >= policy.min_runs

    def found(kind: str, message: str, fail: bool) -> None:
        (out.regressions if fail else out.warnings).append(Finding(scenario, kind, message, "fail" if fail else "warn"))

    for rule in policy.metrics:
        value = current.get(rule.name)
        past = [h.get(rule.name) for h in window if h.get(rule.name) is not None]
        if value is None or len(past) < 2:
            continue
        med, limit = robust_band(past, rule.k, rule.relative, rule.absolute)
        if value <= limit:
            continue
        gates, why = metric_gates(rule, current.get(SAMPLES_KEY))
        why = ("" if enough else f"; {out.baseline_text}") + why
        found(rule.name, f"{rule.name} {value:.1f} vs median {med:.1f} of the last {len(past)} passing runs "
                         f"(limit {limit:.1f}){why}", fail=enough and gates)
    anomalies = current.get("anomalies") or {}
    for kind, count in sorted(anomalies.items()):
        if not count:
            continue
        counts = [int((h.get("anomalies") or {}).get(kind, 0) or 0) for h in window]
        if not any(counts):
            if window:
                found(kind, f"{kind}: {count} (none in the last {len(window)} passing runs; allowed by the "
                            f"guarantee, so it only warns)", fail=False)
            continue
        med, limit = count_band(counts, policy)
        if count > limit:
            found(kind, f"{kind}: {count} vs median {med:.1f} (max {max(counts)}) of the last {len(counts)} "
                        f"passing runs (limit {limit:.0f})" + ("" if enough else f"; {out.baseline_text}"),
                  fail=enough)
    return out


def compare_to_reference(scenario: str, current: Mapping[str, Any], reference: Mapping[str, Any],
                         policy: RegressionPolicy, what: str = "the current version") -> list[Finding]:
    """Pure: a candidate's metrics against one reference run (the upgrade check): relative and absolute margins.

    As against history, a metric fails only when it gates and both runs have the samples it needs to be
    stable (`min_samples`: a p99 of 5,000 sends is one of their 50 slowest); otherwise it warns."""
    found = []
    for rule in policy.metrics:
        value, ref = current.get(rule.name), reference.get(rule.name)
        if value is None or ref is None:
            continue
        limit = ref + max(rule.relative * abs(ref), rule.absolute)
        if value > limit:
            gates, why = metric_gates(rule, min((r.get(SAMPLES_KEY) or 0) for r in (current, reference)))
            found.append(Finding(scenario, rule.name, f"{rule.name} {value:.1f} vs {ref:.1f} on {what} "
                                                      f"(limit {limit:.1f}){why}", "fail" if gates else "warn"))
    return found
