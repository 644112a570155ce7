"""The verdict of a run in plain sentences, as the report leads with it (from the validation result)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from ..spec import anomalies
from ..verdict.summary import row_kind, row_violated, validation_errors, violation_sentence
from .data import KINDS, expectation_of, guarantee_of


def anomaly_sentence(kind: str, n: int) -> str:
    """One plain sentence saying what `n` anomalies of `kind` mean."""
    return anomalies.sentence(kind, n)


@dataclass
class Verdict:
    """The verdict block: status (pass|fail|error), a headline, and sentences (css class, text)."""

    status: str
    headline: str
    lines: list[tuple[str, str]] = field(default_factory=list)


def anomaly_counts(metrics: Mapping[str, Any] | None, anomalies: pd.DataFrame | None) -> dict[str, int] | None:
    """Counts per anomaly kind from metrics.json (or anomalies.parquet); None without analysis."""
    if metrics and isinstance(metrics.get("counts"), Mapping):
        return {str(k): int(v or 0) for k, v in metrics["counts"].items()}
    if anomalies is not None and "kind" in anomalies:
        return {str(k): int(v) for k, v in anomalies["kind"].value_counts().items()}
    return None


def control_lines(detect: Sequence[str], counts: Mapping[str, int] | None) -> list[tuple[str, str]]:
    """Whether each anomaly a negative control must produce was detected."""
    if counts is None:
        return [("warn", f"Negative control: whether {', '.join(detect)} was detected is unknown without analysis.")]
    lines = []
    for kind in detect:
        n = counts.get(kind, 0)
        if n:
            lines.append(("good", f"Expected anomaly detected ({kind}): {anomaly_sentence(kind, n)}"))
        else:
            lines.append(("bad", f"Expected anomaly NOT detected ({kind}): the negative control did not show "
                                 f"the problem it exists to show, so the test cannot be trusted to catch it."))
    return lines


def other_anomaly_lines(counts: Mapping[str, int] | None, skip: set, cls: str, prefix: str) -> list[tuple[str, str]]:
    if not counts:
        return []
    return [(cls, prefix + anomaly_sentence(k, counts[k])) for k in ordered_kinds(counts) if counts[k] and k not in skip]


def tolerated_lines(rows: Sequence[Mapping[str, Any]], counts: Mapping[str, int] | None, skip: set,
                    guarantee: str) -> list[tuple[str, str]]:
    """Non-zero kinds that did not fail the run: allowed by the guarantee, by the scenario with its stated reason
    (`allow`: allowable_with_reason), or informational."""
    cls_of = {row_kind(r): r.get("cls") for r in rows}
    reason_of = {row_kind(r): r.get("allowed_reason") for r in rows}
    out = []
    for k in ordered_kinds(counts or {}):
        if counts[k] and k not in skip:
            if reason_of.get(k):
                out.append(("warn", f"Allowed by the scenario with a reason ({reason_of[k]}): "
                                    + anomaly_sentence(k, counts[k])))
                continue
            prefix = "For information: " if cls_of.get(k) == "info" else f"Allowed under {guarantee}: "
            out.append(("info", prefix + anomaly_sentence(k, counts[k])))
    return out


def ordered_kinds(counts: Mapping[str, int]) -> list[str]:
    """Kinds in report order, unknown ones last."""
    return [k for k in KINDS if k in counts] + sorted(k for k in counts if k not in anomalies.BY_NAME)


def build_verdict(manifest: Mapping[str, Any] | None, validation: Mapping[str, Any] | None,
                  counts: Mapping[str, int] | None) -> Verdict:
    """The verdict, violated expectations and negative-control outcome in plain sentences."""
    guarantee = guarantee_of(manifest) or "unknown guarantee"
    outcome, detect, _ = expectation_of(manifest)
    if manifest is None:
        return Verdict("error", "ERROR: no run manifest",
                       [("bad", "manifest.json is missing or unreadable: the run never started or is not a run directory.")])
    status = manifest.get("status")
    if status == "running":
        return Verdict("error", "NO VERDICT: the run has not finished",
                       [("warn", "The manifest still says running: the run is in progress, or its process died "
                                 "before recording how it ended. A run that did not finish is never a pass.")])
    if status != "complete":
        why = manifest.get("error") or "no reason recorded"
        lines = [("bad", f"The run is {status or 'of unknown status'}: {why}"),
                 ("info", "A run that could not collect all its data is never a pass.")]
        lines += [("bad", f"Fault error: {e}") for e in manifest.get("fault_errors") or []]
        lines += other_anomaly_lines(counts, set(), "info", "Found anyway: ")
        return Verdict("error", f"ERROR: run {status or 'unknown'}", lines)
    if validation is None:
        lines = [("warn", "No validation result: the analysis or the Great Expectations validation did not run "
                          "or failed, so the guarantee has not been judged.")]
        lines += control_lines(detect, counts) if outcome == "detect" else \
            other_anomaly_lines(counts, set(), "info", "Found by the analysis (not judged): ")
        return Verdict("error", f"NOT JUDGED: {guarantee}", lines)
    return judged_verdict(validation, guarantee, outcome, detect, counts)


def judged_verdict(validation: Mapping[str, Any], guarantee: str, outcome: str, detect: Sequence[str],
                   counts: Mapping[str, int] | None) -> Verdict:
    status = str(validation.get("status") or "error")
    rows = [r for r in validation.get("rows") or [] if isinstance(r, Mapping)]
    if counts is None and rows:
        counts = {k: int(r.get("count") or 0) for r in rows if (k := row_kind(r))}
    violated = [r for r in rows if row_violated(r)]
    errors = validation_errors(validation)
    lines: list[tuple[str, str]] = [("bad" if status == "error" else "warn", f"Cannot be judged: {e}") for e in errors]
    if status == "error" and not errors:
        lines.append(("bad", "Validation ended in error (no reason recorded)."))
    if status == "fail":
        lines += [("warn", f"Unconfirmed: {u}; the violation found stands.")
                  for u in validation.get("unconfirmed") or []]
    if outcome == "detect":
        lines += control_lines(detect, counts)
        lines += [("bad", violation_sentence(r, counts)) for r in violated if row_kind(r) not in detect]
        # Found outside `detect` though the guarantee forbids it: not decisive, but never "allowed".
        forbidden = {k for r in rows if r.get("also_found") and (k := row_kind(r))}
        skip = set(detect) | {row_kind(r) for r in violated}
        lines += other_anomaly_lines(counts, skip | (set(counts or {}) - forbidden), "warn",
                                     f"Also found (forbidden by the guarantee, {guarantee}): ")
        lines += other_anomaly_lines(counts, skip | forbidden, "info", "Also found (not decisive in a negative control): ")
        what = {"pass": "negative control detected what it must", "fail": "negative control missed its anomaly"}
        return Verdict(status, f"{status.upper()}: {what.get(status, 'negative control')} ({guarantee})", lines)
    lines += [("bad", violation_sentence(r, counts)) for r in violated]
    lines += tolerated_lines(rows, counts, {row_kind(r) for r in violated}, guarantee)
    if status == "pass" and not violated and not any(cls == "info" for cls, _ in lines):
        lines.insert(0, ("good", f"Every {guarantee} expectation held: no anomaly the guarantee forbids."))
    elif status == "pass" and not violated:
        lines.insert(0, ("good", f"Every {guarantee} expectation held."))
    text = {"pass": f"{guarantee} held", "fail": f"{guarantee} violated"}.get(status, f"{guarantee} not judged")
    return Verdict(status, f"{status.upper()}: {text}", lines)
