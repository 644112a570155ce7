"""Verdicts: validate a run's analysis against its scenario's guarantee with Great Expectations.

`validate(run_dir)` reads `<run_dir>/analysis/` (written by spark/analyze.py), builds
the suites of the scenario's guarantee from `expectations/policy.yaml`
(`kafkaproof.policy`), runs them through GX checkpoints over three small pandas
frames (anomaly counts, anomaly rows, values), builds Data Docs into
`<run_dir>/validation/data_docs/` and writes `<run_dir>/validation/result.json`.

Status: `error` when the run cannot be judged (manifest not complete, analysis
missing, unseen values, incomplete drain, a fault never healed) — never a pass;
otherwise `fail` when a suite fails (a violation found stands even when a fault's
effect is unconfirmed), `error` when it would pass but a fault or condition was not
exercised or there was nothing to judge (no sends; consumers that read nothing),
else `pass`.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import LedgerError
from ..paths import write_text_atomic
from ..spec.manifest import Manifest
from .policy import (
    INDEX_COLUMNS,
    VALUE_FLAGS,
    Expect,
    Policy,
    judge,
    load_policy,
    normalize_expect,
    suites,
)

log = logging.getLogger(__name__)

ANALYSIS_DIR = "analysis"
VALIDATION_DIR = "validation"
RESULT_FILE = "result.json"
EXAMPLES = 10
STATUSES = ("pass", "fail", "error")


@dataclass
class AnomalyRow:
    """One anomaly kind's line of the verdict."""

    anomaly: str
    count: int
    allowed: bool
    expected_detected: bool
    ok: bool
    cls: str
    summary: str
    examples: list[int] = field(default_factory=list)
    also_found: bool = False  # negative control: found outside `detect`, forbidden by the guarantee
    not_applicable: str | None = None  # why the run cannot judge this kind (never a pass): manifest's reason
    allowed_reason: str | None = None  # allowable_with_reason: the scenario's `allow` reason for accepting it


@dataclass
class ValidationResult:
    """The verdict on one run."""

    run_dir: Path
    success: bool
    status: str                      # pass | fail | error
    guarantee: str | None
    expect: dict[str, Any]
    rows: list[AnomalyRow]
    errors: list[str]
    suites: dict[str, bool]          # GX suite name -> success
    data_docs: Path | None
    claims: list[str] = field(default_factory=list)       # application-level claims judged besides the guarantee
    exercised: list[dict[str, Any]] = field(default_factory=list)  # the analysis' "did the check bite" results
    # Why a pass would not have meant anything (a fault not exercised, nothing to judge): named beside a FAIL,
    # the errors of an ERROR.
    unconfirmed: list[str] = field(default_factory=list)

    @property
    def failing(self) -> list[AnomalyRow]:
        """Rows that decide a non-pass verdict."""
        return [r for r in self.rows if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["run_dir"] = str(self.run_dir)
        d["data_docs"] = None if self.data_docs is None else str(self.data_docs)
        return d


# --------------------------------------------------------------------------- inputs

def read_metrics(run_dir: Path) -> dict[str, Any]:
    """`analysis/metrics.json` of a run; LedgerError when the analysis has not run."""
    path = Path(run_dir) / ANALYSIS_DIR / "metrics.json"
    if not path.exists():
        raise LedgerError(f"{path}: no analysis; run `spark-submit spark/analyze.py {run_dir}` first")
    return json.loads(path.read_text())


def run_errors(manifest: Manifest, metrics: Mapping[str, Any], policy: Policy) -> list[str]:
    """Reasons the run cannot be judged (empty: it can)."""
    errors = []
    status = manifest.status
    if status != "complete":
        why = manifest.error
        errors.append(f"manifest status is {status!r}" + (f": {why}" if why else "") + "; an incomplete run never passes")
    counts = metrics.get("counts", {})
    for name in policy.incomplete:
        if counts.get(name, 0):
            errors.append(f"{counts[name]} {name} value(s): acked values the final drain did not reach; "
                          "the run is incomplete")
    incomplete = [str(p["partition"]) for p in metrics.get("partitions", []) if not p.get("complete")]
    if incomplete:
        errors.append(f"final drain incomplete for partition(s) {', '.join(incomplete)}")
    elif not metrics.get("partitions"):
        errors.append("manifest has no audit.partitions: the final drain was not recorded")
    if metrics.get("unhealed_faults"):
        errors.append(f"fault(s) never healed: {', '.join(metrics['unhealed_faults'])}")
    return errors


def unconfirmed_reasons(metrics: Mapping[str, Any]) -> list[str]:
    """Why a pass would mean nothing: a fault or condition not exercised, or nothing to judge.

    Unlike `run_errors`, these do not make a violation found any less real: they turn only a
    would-be pass into an error (`decide_status`)."""
    reasons = [f"not exercised: {r['check']} {r['subject']}: {r['evidence']}" for r in not_exercised(metrics)]
    return reasons + nothing_to_judge(metrics)


def nothing_to_judge(metrics: Mapping[str, Any]) -> list[str]:
    """Pure: an empty run. No sends at all; or acknowledged values (of committed transactions, if any) and
    consumers configured that read nothing at all. A run whose sends all failed has nothing acknowledged
    to read: it is judged (its scenario says what it expects, e.g. `exercised: send_errors`)."""
    outcomes = metrics.get("outcomes")
    if not isinstance(outcomes, Mapping) or "sent" not in outcomes:
        return []  # an analysis without outcomes says nothing either way
    if not outcomes.get("sent"):
        return ["nothing to judge: 0 sends"]
    expected = int(outcomes.get("expected") or 0)
    if metrics.get("has_consumers") and expected and not outcomes.get("reads"):
        return [f"nothing to judge on the consumer side: {expected:,} acknowledged value(s), and the consumers "
                "configured read nothing at all (0 reads)"]
    return []


def decide_status(errors: Sequence[str], unconfirmed: Sequence[str], judged_ok: bool) -> tuple[str, list[str]]:
    """Pure: (status, errors) from the reasons the run cannot be judged (`run_errors`), the reasons a pass
    would mean nothing (`unconfirmed_reasons`) and whether the suites and the policy passed it.

    A violation found is a FAIL even when a fault's effect was not confirmed; "not exercised" and
    "nothing to judge" turn only a would-be pass into an ERROR."""
    why = [f"{u}; the run tested nothing it claims" for u in unconfirmed]
    if errors:
        return "error", [*errors, *why]
    if not judged_ok:
        return "fail", []
    if unconfirmed:
        return "error", why
    return "pass", []


def not_exercised(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The analysis' exercised checks that did not hold: a fault without effect, a condition not met."""
    return [r for r in metrics.get("exercised") or [] if not r.get("held")]


PIPELINE_CLAIM = "exactly_once_pipeline"
SHARE_CLAIM = "share_group"
# Claims judged on a ledger of their own: the claim -> metrics' section saying whether the run has it.
LEDGER_CLAIMS: dict[str, str] = {PIPELINE_CLAIM: "pipeline", SHARE_CLAIM: "share"}


def claim_not_applicable(metrics: Mapping[str, Any], claims: Sequence[str], policy: Policy) -> dict[str, str]:
    """Pure: kind -> why the run cannot judge it, for a claim whose data the run lacks: the claim
    exactly_once_pipeline without the pipeline ledger, share_group without the share ledger (metrics'
    `pipeline.applicable` / `share.applicable` false or absent)."""
    out: dict[str, str] = {}
    for claim, section_name in LEDGER_CLAIMS.items():
        section = metrics.get(section_name) or {}
        if claim not in claims or section.get("applicable"):
            continue
        why = section.get("reason") or f"the analysis has no {section_name} section (analysed before it existed)"
        out.update({k: f"claim {claim}: {why}" for k in sorted(policy.forbidden_by_claim[claim])})
    return out


def without_kinds(counts: Mapping[str, int], not_applicable: Mapping[str, str]) -> dict[str, int]:
    """Pure: the analysis' counts with the kinds the run cannot judge at 0: the suites neither pass nor fail
    them on data that cannot show them; the verdict's rows say `not applicable` with the reason."""
    return {k: (0 if k in not_applicable else v) for k, v in counts.items()}


def counts_frame(counts: Mapping[str, int], policy: Policy):
    """One-row pandas frame, one int64 column per anomaly kind."""
    import pandas as pd

    return pd.DataFrame({k: pd.Series([int(counts.get(k, 0) or 0)], dtype="int64") for k in policy.names})


def anomalies_frame(run_dir: Path):
    """analysis/anomalies.parquet as pandas (kind + the index columns + detail)."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / ANALYSIS_DIR / "anomalies.parquet"
    table = pq.read_table(path, columns=["kind", *INDEX_COLUMNS, "detail"])
    return table.to_pandas(integer_object_nulls=True)


def values_frame(run_dir: Path, policy: Policy):
    """The columns of analysis/values.parquet the values suite checks."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / ANALYSIS_DIR / "values.parquet"
    cols = ["value_id", "outcome", "log_count", *sorted(set(VALUE_FLAGS.values()))]
    # Categorical strings: a 10M-value run stays a few hundred MB.
    return pq.read_table(path, columns=cols).to_pandas(strings_to_categorical=True)


def anomaly_examples(frame, limit: int = EXAMPLES) -> dict[str, list[int]]:
    """Up to `limit` smallest value ids per kind."""
    out: dict[str, list[int]] = {}
    if len(frame) == 0:
        return out
    with_ids = frame[frame["value_id"].notna()]
    for kind, ids in with_ids.groupby("kind")["value_id"]:
        out[str(kind)] = sorted({int(v) for v in ids})[:limit]
    return out


# --------------------------------------------------------------------------- GX

def _import_gx():
    try:
        import great_expectations as gx
    except ImportError as e:
        raise LedgerError(f"validation needs Great Expectations ({e}): pip install 'kafkaproof[analysis]' "
                          f"(or a checkout's requirements.txt)") from None
    return gx


def _gx_context(docs_dir: Path):
    """An ephemeral GX context whose only Data Docs site is `docs_dir`."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    gx = _import_gx()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    site = {
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites={"run": site},
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _gx_suite(spec: Mapping[str, Any]):
    gx = _import_gx()

    suite = gx.ExpectationSuite(name=spec["name"], expectations=[dict(e) for e in spec["expectations"]],
                                meta=dict(spec.get("meta") or {}))
    if len(suite.expectations) != len(spec["expectations"]):
        raise LedgerError(f"GX refused part of suite {spec['name']}; see the log (GX {gx.__version__})")
    return suite


def run_checkpoints(frames: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]], docs_dir: Path,
                    build_docs: bool = True) -> dict[str, bool]:
    """Validate each frame with its suite through a GX checkpoint; Data Docs into `docs_dir`."""
    import great_expectations as gx

    docs_dir.mkdir(parents=True, exist_ok=True)
    ctx = _gx_context(docs_dir)
    source = ctx.data_sources.add_pandas("kafkaproof")
    results: dict[str, bool] = {}
    for frame_name, frame in frames.items():
        spec = specs[frame_name]
        asset = source.add_dataframe_asset(name=frame_name)
        batch = asset.add_batch_definition_whole_dataframe(f"{frame_name}-all")
        suite = ctx.suites.add(_gx_suite(spec))
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=spec["name"], data=batch, suite=suite))
        index_cols = [c for c in ("value_id", "partition", "offset") if c in frame.columns]
        checkpoint = ctx.checkpoints.add(gx.Checkpoint(
            name=f"kafkaproof-{frame_name}",
            validation_definitions=[vd],
            actions=[],  # Data Docs once, after every checkpoint ran (a site build renders them all)
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES,
                           "unexpected_index_column_names": index_cols},
        ))
        outcome = checkpoint.run(batch_parameters={"dataframe": frame})
        results[spec["name"]] = bool(outcome.success)
    if build_docs:
        ctx.build_data_docs(site_names=["run"])
    return results


# --------------------------------------------------------------------------- verdict

def validate(run_dir: Path, *, guarantee: str | None = None, expect: Any = None,
             policy: Policy | None = None, data_docs: bool = True) -> ValidationResult:
    """Judge a run: GX suites from the policy over its analysis; writes validation/result.json.

    `guarantee`/`expect` override the manifest's scenario (to judge one history
    under several guarantees); `data_docs=False` skips building Data Docs. Raises ScenarioError for an invalid guarantee or
    expect, PolicyError for a bad policy file, LedgerError when there is no manifest.
    """
    run_dir = Path(run_dir).resolve()  # GX data docs need an absolute base directory
    policy = policy or load_policy()
    manifest = Manifest.read(run_dir)
    scenario = manifest.scenario
    guarantee = guarantee or scenario.get("guarantee") or "at-least-once"
    policy.check_guarantee(guarantee)
    claims = sorted((scenario.get("claims") or {}).keys())
    policy.check_claims(claims)
    exp = normalize_expect(expect if expect is not None else manifest.expect, policy)
    allow = policy.check_allow(scenario.get("allow"), f"{run_dir / 'manifest.json'}: scenario")
    out_dir = run_dir / VALIDATION_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    expect_dict = {"outcome": exp.outcome, "detect": list(exp.detect)}

    try:
        metrics = read_metrics(run_dir)
    except LedgerError as exc:
        result = ValidationResult(run_dir, False, "error", guarantee, expect_dict, [], [str(exc)], {}, None, claims)
        return _save(result)

    claim_na = claim_not_applicable(metrics, claims, policy)
    na = {**manifest.not_applicable, **claim_na}
    counts = without_kinds(metrics.get("counts", {}), na)
    unknown = sorted(set(counts) - set(policy.names))
    errors = run_errors(manifest, metrics, policy)
    if unknown:
        errors.append(f"analysis counts kinds the policy does not know: {', '.join(unknown)}")
    errors += [f"expect.detect: {k} does not apply to this run: {na[k]}" for k in exp.detect if k in na]
    anomalies = anomalies_frame(run_dir)
    anomalies = anomalies[~anomalies["kind"].isin(list(na))]
    examples = anomaly_examples(anomalies)
    rows = [AnomalyRow(j.anomaly, j.count, j.allowed, j.expected_detected, j.ok, policy.kind(j.anomaly).cls,
                       policy.kind(j.anomaly).summary, examples.get(j.anomaly, []), j.also_found,
                       na.get(j.anomaly), j.allowed_reason)
            for j in judge(counts, policy, guarantee, exp, claims, allow)]

    specs = suites(policy, guarantee, exp, claims, allow)
    values = values_frame(run_dir, policy)
    for kind in na:  # a flag the run cannot judge is not a finding
        if kind in VALUE_FLAGS and VALUE_FLAGS[kind] in values:
            values[VALUE_FLAGS[kind]] = False
    frames = {"counts": counts_frame(counts, policy), "anomalies": anomalies, "values": values}
    docs_dir = out_dir / "data_docs"
    suite_results = run_checkpoints(frames, specs, docs_dir, build_docs=data_docs)
    gx_ok = all(suite_results.values())
    policy_ok = all(r.ok for r in rows)
    if gx_ok != policy_ok:
        # Both read the same policy; disagreement is a bug, and must never turn into a pass.
        errors.append(f"GX suites ({'pass' if gx_ok else 'fail'}) and policy ({'pass' if policy_ok else 'fail'}) "
                      "disagree; treat as a kafkaproof bug")
    # A claim the run cannot judge is never passed: a would-be pass is an error naming why.
    unconfirmed = unconfirmed_reasons(metrics) + sorted({f"not applicable: {why}" for why in claim_na.values()})
    status, errors = decide_status(errors, unconfirmed, gx_ok and policy_ok)
    index = docs_dir / "index.html"
    result = ValidationResult(run_dir, status == "pass", status, guarantee, expect_dict, rows, errors,
                              suite_results, index if data_docs and index.exists() else None, claims,
                              list(metrics.get("exercised") or []), unconfirmed)
    return _save(result)


def _save(result: ValidationResult) -> ValidationResult:
    write_text_atomic(result.run_dir / VALIDATION_DIR / RESULT_FILE,
                      json.dumps(result.to_dict(), indent=2, sort_keys=True))
    return result


def format_result(result: ValidationResult, *, all_rows: bool = False) -> str:
    """Human summary for the CLI: verdict, then which anomalies, how many, example value ids."""
    head = f"{result.status.upper()}  {result.run_dir.name}  guarantee={result.guarantee}"
    if result.claims:
        head += f"  claims={','.join(result.claims)}"
    if result.expect.get("outcome") == "detect":
        head += f"  negative control: detect {', '.join(result.expect['detect'])}"
    lines = [head]
    for e in result.errors:
        lines.append(f"  error: {e}")
    if result.status == "fail":
        for u in result.unconfirmed:
            lines.append(f"  unconfirmed: {u}; the violation found stands")
    shown = [r for r in result.rows if all_rows or r.count or r.expected_detected or not r.ok or r.not_applicable]
    if shown:
        width = max(len(r.anomaly) for r in shown)
        for r in shown:
            if r.not_applicable:
                lines.append(f"  {'n/a':>7}  {r.anomaly:<{width}}  not applicable: {r.not_applicable}")
                continue
            if not r.ok:
                mark = "MISSING" if r.expected_detected else "FAIL"
            elif r.also_found:
                mark = "ALSO"
            elif r.expected_detected:
                mark = "found"
            elif r.cls == "info":
                mark = "info"
            else:
                mark = "allowed" if r.count else "ok"
            ids = f"  e.g. value ids {', '.join(map(str, r.examples))}" if r.examples else ""
            also = "  also found (forbidden by the guarantee)" if r.also_found else ""
            if r.allowed_reason and r.count:
                also += f"  allowable with reason: {r.allowed_reason}"
            lines.append(f"  {mark:>7}  {r.anomaly:<{width}}  {r.count:>8}{ids}{also}")
    else:
        lines.append("  no anomalies")
    for r in result.exercised:
        lines.append(f"  {'held' if r.get('held') else 'NOT MET':>7}  {r['check']} {r['subject']}: {r['evidence']}")
    if result.data_docs:
        lines.append(f"  data docs: {result.data_docs}")
    return "\n".join(lines)


def load_result(run_dir: Path) -> dict[str, Any]:
    """The saved `validation/result.json` of a run."""
    path = Path(run_dir) / VALIDATION_DIR / RESULT_FILE
    if not path.exists():
        raise LedgerError(f"{path}: not validated yet")
    return json.loads(path.read_text())


__all__: Sequence[str] = ("AnomalyRow", "ValidationResult", "validate", "format_result", "load_result",
                          "read_metrics", "Expect", "decide_status", "nothing_to_judge", "unconfirmed_reasons")
