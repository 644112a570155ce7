"""Verdicts of scenario runs as the gate and the batch pages need them, and the gate itself.

`judge_run` reads one run's manifest and validation result (the one place that says what
a run's verdict is: anything but a complete, validated run is an error); `summarize` adds
the comparison with history (`regression.py`) and records the run; `gate` decides a batch.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import LedgerError
from ..spec import anomalies
from ..spec.manifest import Manifest
from . import history
from .regression import RegressionPolicy, compare_to_reference, judge_history


@dataclass
class ScenarioSummary:
    """What the gate and the night report need about one scenario run."""

    scenario: str
    run_id: str | None
    run_dir: str | None
    verdict: str  # pass | fail | error
    guarantee: str | None = None
    expect: str | None = None
    kafka_version: str | None = None
    violations: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)  # fail the gate
    warnings: list[str] = field(default_factory=list)     # shown, never fail: drift on a thin baseline, ...
    baseline: str | None = None                           # "baseline: 2 of 5 runs ..."
    error: str | None = None
    report: str | None = None
    metrics: dict = field(default_factory=dict)
    reused_after: list[str] = field(default_factory=list)  # the cluster ran these scenarios first


def judge_run(run_dir: str | Path | None, scenario: str | None = None, error: str | None = None) -> ScenarioSummary:
    """Pure of history: the verdict of one run from its manifest and validation result.

    Anything but a complete, validated run is an error, never a pass; `error` says why when
    there is no run directory (e.g. the scenario could not take the run's overrides).
    """
    if not run_dir:
        return ScenarioSummary(scenario or "?", None, None, "error", error=error or "the run produced no run directory")
    rd = Path(run_dir)
    try:
        manifest = Manifest.read(rd)
    except LedgerError as e:
        return ScenarioSummary(scenario or rd.name, None, str(rd), "error", error=str(e))
    summary = ScenarioSummary(scenario or manifest.scenario_name or rd.name, manifest.run_id, str(rd), "error",
                              guarantee=manifest.guarantee, expect=manifest.expect_outcome,
                              kafka_version=manifest.kafka_version, reused_after=manifest.reused_after)
    result_path = rd / "validation" / "result.json"
    metrics_path = rd / "analysis" / "metrics.json"
    report = rd / "report" / "index.html"
    summary.report = str(report) if report.exists() else None
    if manifest.status != "complete":
        summary.error = f"run {manifest.status}: {manifest.error}"
    elif not result_path.exists():
        summary.error = "no validation result (analysis or validation failed)"
    else:
        result = json.loads(result_path.read_text())
        summary.verdict = str(result.get("status") or "error")
        counts = {k: int(r.get("count") or 0) for r in result.get("rows") or [] if (k := row_kind(r))}
        summary.violations = [violation_sentence(r, counts) for r in result.get("rows") or [] if row_violated(r)]
        if summary.verdict == "fail":  # a violation stands; name what the run could not confirm beside it
            summary.warnings += [f"unconfirmed: {u}" for u in result.get("unconfirmed") or []]
        if summary.verdict == "error":
            summary.error = "; ".join(validation_errors(result)) or "validation error"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    summary.metrics = history.key_metrics(metrics)
    return summary


def summarize(run_dir: str | None, scenario: str, batch_id: str, record_history: bool = True,
              error: str | None = None, label: str = "") -> dict:
    """The verdict of one scenario run (`judge_run`), its regressions against history, and its history row
    (`label`: the run's part in its batch, e.g. candidate or rolling in an upgrade check)."""
    summary = judge_run(run_dir, scenario, error)
    if summary.run_id is None:
        return asdict(summary)
    manifest = Manifest.read(Path(summary.run_dir))
    if summary.verdict == "pass" and summary.expect == "pass":
        policy = RegressionPolicy.load()
        # A passing run the gate flagged as a regression never joins the baseline it regressed from.
        past = [r["metrics"] for r in history.runs(scenario, summary.kafka_version, verdict="pass",
                                                   before_run_id=summary.run_id, limit=policy.window * 2,
                                                   scenario_hash=manifest.scenario_hash)
                if not r["metrics"].get("regressed")][: policy.window]
        judged = judge_history(scenario, summary.metrics, past, policy)
        summary.regressions = [f.message for f in judged.regressions]
        summary.warnings = [f.message for f in judged.warnings]
        summary.baseline = judged.baseline_text
    if summary.regressions:
        summary.metrics["regressed"] = True
    if record_history:
        history.record({"scenario": scenario, "run_id": summary.run_id, "batch_id": batch_id,
                        "kafka_version": summary.kafka_version, "client_version": manifest.client_version,
                        "scenario_hash": manifest.scenario_hash, "guarantee": summary.guarantee,
                        "verdict": summary.verdict, "status": manifest.status, "metrics": summary.metrics,
                        "report": str(Path(summary.run_dir) / "report" / "index.html"), "label": label or None})
    return asdict(summary)


def gate(summaries: list[dict]) -> tuple[bool, list[str]]:
    """Pure: whether the batch passes, and one line per problem (a batch that judged nothing fails)."""
    if not summaries:
        return False, ["no scenario ran: the suite selected none (check the tag or the scenario list)"]
    problems = []
    for s in summaries:
        if s is None:
            problems.append("a scenario produced no summary (its tasks failed before summarising)")
            continue
        where = f"{s['scenario']} ({s.get('run_id') or 'no run'})"
        if s["verdict"] == "error":
            problems.append(f"{where}: error: {s.get('error')}")
        elif s["verdict"] == "fail":
            what = "negative control not detected" if s.get("expect") == "detect" else "guarantee violated"
            problems.append(f"{where}: {what}: " + "; ".join(s.get("violations") or ["see report"]))
        for r in s.get("regressions") or []:
            problems.append(f"{where}: regression: {r}")
    return not problems, problems


def upgrade_differences(summaries: list[dict]) -> list[str]:
    """Pure: a rolling upgrade (label `rolling`) that did not pass, and where the candidate version does
    worse than the current one on the same scenario."""
    by = {(s["scenario"], s.get("label")): s for s in summaries}
    worse = []
    for (scenario, label), roll in sorted(by.items()):
        if label == "rolling" and roll["verdict"] != "pass":
            what = "; ".join(roll.get("violations") or []) or roll.get("error") or "see its report"
            worse.append(f"{scenario}: the rolling upgrade from {roll.get('kafka_version')} did not pass "
                         f"({roll['verdict']}): {what}")
    rank = {"pass": 0, "fail": 1, "error": 2}
    for (scenario, label), cand in sorted(by.items()):
        if label != "candidate":
            continue
        cur = by.get((scenario, "current"))
        if cur is None:
            worse.append(f"{scenario}: no result on the current version to compare with")
            continue
        if rank[cand["verdict"]] > rank[cur["verdict"]]:
            worse.append(f"{scenario}: {cur['verdict']} on {cur.get('kafka_version')} but {cand['verdict']} on "
                         f"{cand.get('kafka_version')}")
        worse += [f"{scenario}: candidate {f.message}" for f in compare_to_reference(
            scenario, cand.get("metrics", {}), cur.get("metrics", {}), RegressionPolicy.load(),
            what=f"the current version ({cur.get('kafka_version')})") if f.severity == "fail"]
    return worse


OUTCOME_KEYS = ("acked", "failed", "indefinite")
# Timings called out only when the clients differ by more than this factor and this much (noise otherwise).
TIMING_KEYS = {"publish_p99_ms": ("p99 send→ack", "ms", 50.0), "recovery_s": ("recovery", "s", 1.0)}
TIMING_FACTOR = 1.5


def client_differences(summaries: list[dict | None]) -> list[str]:
    """Pure: for each scenario run under several clients (a client matrix: `label` = client), where the
    clients differ — verdict, send outcomes, anomaly counts — e.g. "lost-acks: duplicates: java 0,
    librdkafka 72". Same faults, same cluster settings: a difference is the clients'."""
    by: dict[str, dict[str, dict]] = {}
    for s in summaries:
        if s and s.get("label"):
            by.setdefault(s["scenario"], {})[s["label"]] = s
    out = []
    for scenario, runs in sorted(by.items()):
        labels = sorted(runs)
        if len(labels) < 2:
            continue

        def differ(what: str, values: dict[str, Any]) -> None:
            if len({json.dumps(v) for v in values.values()}) > 1:
                shown = ", ".join(f"{label} {'-' if v is None else f'{v:,}' if isinstance(v, int) else v}"
                                  for label, v in values.items())
                out.append(f"{scenario}: {what}: {shown}")

        differ("verdict", {label: runs[label].get("verdict") for label in labels})
        metrics = {label: runs[label].get("metrics") or {} for label in labels}
        for key in OUTCOME_KEYS:
            differ(key, {label: (m.get("outcomes") or {}).get(key) for label, m in metrics.items()})
        counts = {label: m.get("anomalies") or m.get("counts") or {} for label, m in metrics.items()}
        for kind in sorted(set().union(*counts.values())):
            differ(kind, {label: int(c.get(kind) or 0) for label, c in counts.items()})
        for key, (what, unit, floor) in TIMING_KEYS.items():
            values = {label: m.get(key) for label, m in metrics.items()}
            known = [v for v in values.values() if isinstance(v, (int, float))]
            if len(known) == len(values) and max(known) - min(known) > floor and max(known) > TIMING_FACTOR * min(known):
                out.append(f"{scenario}: {what}: " + ", ".join(f"{label} {v:,.0f} {unit}" if unit == "ms" else
                                                               f"{label} {v:,.1f} {unit}" for label, v in values.items()))
    return out


def row_kind(row: Mapping[str, Any]) -> str | None:
    """The anomaly kind a validation row is about (`anomaly` in validation.py's rows)."""
    for key in ("anomaly", "kind"):
        v = row.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def row_count(row: Mapping[str, Any], counts: Mapping[str, int] | None) -> int | None:
    v = row.get("count")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    kind = row_kind(row)
    return None if kind is None or counts is None else counts.get(kind)


def row_violated(row: Mapping[str, Any]) -> bool:
    """Whether a validation row fails the run (`ok: false`; older results said `violated`)."""
    if "ok" in row:
        return not row["ok"]
    return bool(row.get("violated"))


def violation_sentence(row: Mapping[str, Any], counts: Mapping[str, int] | None) -> str:
    """A violated validation row in one plain sentence with its count."""
    kind, n = row_kind(row), row_count(row, counts)
    if kind and n is not None and n > 0:
        return anomalies.sentence(kind, n)
    if kind and row.get("expected_detected"):
        return f"The expected anomaly {kind} was not detected."
    return str(row.get("message") or row.get("summary") or kind or row)


def validation_errors(validation: Mapping[str, Any]) -> list[str]:
    errors = [str(e) for e in validation.get("errors") or []]
    return errors + ([str(validation["error"])] if validation.get("error") else [])
