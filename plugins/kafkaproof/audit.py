"""`kafkaproof audit`: an existing cluster audited on a replica (docs/audit.md).

Between the batch runner and the CLI (tests/unit/test_architecture.py RANK 9.5): `run_audit` reads the
inputs and discovers the cluster (read-only: bad input fails here, before any replica starts), plans the
classes (`spec.audit_plan.plan_audit`), writes the suite, runs every class × fault of the matrix as one batch
(`batch.run_batch`, runs under `out/runs`), reads each run through `report.data.run_outcomes`, then searches
fixes in rounds (one batch per round) and writes audit.json and audit.html (`report.audit_page`).

The fix search is pure (`FixSearch`, `next_trial`, `advance`): per failed class, the candidates of
`spec.audit_fixes.fix_candidates` smallest first, each run on the faults the class failed; one that passes
them is then confirmed on the class's other faults; a fix is proven only when the class's whole matrix
passes with it; at most `max_fix_tries` candidates per class.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import ScenarioError
from .spec.audit_fixes import apply_fixes, fix_candidates
from .spec.audit_plan import (FAULTS, AuditPlan, ReliabilityClass, class_scenario, file_name, plan_audit,
                              scenario_name, scenario_text, utc_text, write_suite)
from .spec.client_settings import ClientSettings

log = logging.getLogger(__name__)

VERDICT_EXIT = {"pass": 0, "fail": 1, "error": 2}
SCHEMA = 1
OUTCOMES = ("passed", "failed", "error", "not confirmed")
RUNS = "runs"  # a class's RunRows in audit.json (named once: the key is also a cluster state file's)


@dataclass(frozen=True)
class AuditRequest:
    """What to audit and how: the cluster (`bootstrap`, `client_config` path), the team's client settings
    (`app_config` path, its format and role as `kafkaproof audit --app-config` takes them), a topic filter,
    where the suite, runs, audit.json and audit.html go (`out`), the fault ids of the matrix to run (empty:
    all of spec.audit_plan.FAULTS), `max_classes`, whether to search fixes and how many tries per class."""

    out: Path
    bootstrap: str | None = None
    client_config: str | None = None
    app_config: str | None = None
    app_format: str | None = None
    app_role: str | None = None
    topics: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    max_classes: int | None = None
    fixes: bool = True
    max_fix_tries: int = 3
    backend: str = "local"


@dataclass
class AuditResult:
    """An audit's outcome: the audit.json document, where it and audit.html were written, the verdict
    (pass | fail | error) and the process exit code that goes with it (0 | 1 | 2)."""

    audit: dict[str, Any]
    json_path: Path
    html_path: Path
    verdict: str
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]


# --- the fix search (pure) -----------------------------------------------------------------------

@dataclass(frozen=True)
class FixTrial:
    """One step of a class's fix search: run `fixes` on `faults` (the failed ones, or with `confirm` the
    class's other faults)."""

    label: str
    fixes: tuple[str, ...]
    faults: tuple[str, ...]
    confirm: bool = False


@dataclass(frozen=True)
class TriedFix:
    """A candidate tried: its fixes, outcome (passed | failed | error | not confirmed, or `pending` while it
    awaits its confirmation) and the RunRows of its runs."""

    fixes: tuple[str, ...]
    outcome: str
    rows: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class FixSearch:
    """A failed class's fix search: the faults it failed and passed, its candidates (smallest first), how many
    it may try, what it tried and the candidate awaiting confirmation."""

    label: str
    failed: tuple[str, ...]
    passed: tuple[str, ...]
    candidates: tuple[tuple[str, ...], ...]
    max_tries: int
    tried: tuple[TriedFix, ...] = ()
    pending: TriedFix | None = None

    @property
    def proven(self) -> TriedFix | None:
        """The candidate with which the class's whole matrix passed, if any."""
        return next((t for t in self.tried if t.outcome == "passed"), None)


def next_trial(search: FixSearch) -> FixTrial | None:
    """Pure: what the search runs next: the pending candidate's confirmation, else the next candidate on the
    failed faults; None when a fix is proven, or the candidates or tries are used up."""
    if search.proven:
        return None
    if search.pending:
        return FixTrial(search.label, search.pending.fixes, search.passed, confirm=True)
    n = len(search.tried)
    if n >= min(search.max_tries, len(search.candidates)):
        return None
    return FixTrial(search.label, search.candidates[n], search.failed)


def advance(search: FixSearch, trial: FixTrial, rows: Sequence[Mapping[str, Any]]) -> FixSearch:
    """Pure: the search after `trial` ran with RunRows `rows` (one per fault of the trial)."""
    statuses = {r["status"] for r in rows}
    rows = tuple(dict(r) for r in rows)
    if trial.confirm:
        assert search.pending is not None and search.pending.fixes == trial.fixes
        outcome = "error" if "error" in statuses else "not confirmed" if "failed" in statuses else "passed"
        done = TriedFix(trial.fixes, outcome, search.pending.rows + rows)
        return dataclasses.replace(search, tried=search.tried + (done,), pending=None)
    if "error" in statuses or "failed" in statuses:
        outcome = "error" if "error" in statuses else "failed"
        return dataclasses.replace(search, tried=search.tried + (TriedFix(trial.fixes, outcome, rows),))
    if search.passed:
        return dataclasses.replace(search, pending=TriedFix(trial.fixes, "pending", rows))
    return dataclasses.replace(search, tried=search.tried + (TriedFix(trial.fixes, "passed", rows),))


def class_candidates(plan: AuditPlan, cls: ReliabilityClass, failed: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Pure: the fix candidates of a class that failed `failed` (smallest first, as `fix_candidates` gives them
    for the first failed fault), those that apply to every failed fault."""
    docs = [class_scenario(plan, cls, f) for f in failed]
    return tuple(c.fixes for c in fix_candidates(plan, cls, docs[0])
                 if all(apply_fixes(d, c.fixes) is not None for d in docs[1:]))


def fixed_document(plan: AuditPlan, cls: ReliabilityClass, fault: str, fixes: tuple[str, ...]
                   ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """Pure: the class's scenario under `fault` with those of `fixes` applied that apply to it (in order),
    renamed `...-fix-<fixes>`, and the changes; None when none applies (the scenario runs unchanged)."""
    doc = class_scenario(plan, cls, fault)
    changes: list[str] = []
    for fix in fixes:
        applied = apply_fixes(doc, (fix,))
        if applied is not None:
            doc, change = applied
            changes += change
    if not changes:
        return None
    doc["name"] = scenario_name(cls.label, fault, "fix-" + "-".join(fixes))
    doc["description"] = f"{doc['description']} Fix tried: {'; '.join(changes)}."
    doc["tags"] = [*doc["tags"], "audit-fix"]
    return doc, tuple(changes)


def class_verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """Pure: error if any run errored, else fail if any failed, else pass."""
    statuses = {r["status"] for r in rows}
    return "error" if "error" in statuses or not rows else "fail" if "failed" in statuses else "pass"


def audit_verdict(class_verdicts: Sequence[str]) -> str:
    """Pure: error if any class errored, else fail if any failed, else pass (no class: error)."""
    if not class_verdicts or "error" in class_verdicts:
        return "error"
    return "fail" if "fail" in class_verdicts else "pass"


# --- inputs --------------------------------------------------------------------------------------

def audit_id(wall: float) -> str:
    """`audit-<UTC yyyymmddTHHMMSS>-<4 hex>`."""
    return f"audit-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(wall))}-{secrets.token_hex(2)}"


def matrix_faults(faults: Sequence[str]) -> tuple[str, ...]:
    """The faults of the matrix to run, in `FAULTS`' order (none given: all); ScenarioError for an unknown id."""
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ScenarioError(f"--faults {','.join(unknown)}: no such fault of the audit's matrix; the matrix: "
                            f"{', '.join(FAULTS)}")
    return tuple(f for f in FAULTS if not faults or f in faults)


def read_inputs(request: AuditRequest) -> tuple[str, dict[str, Any], ClientSettings | None]:
    """(bootstrap, connection config, the team's client settings) from the request's files
    (`run.client_config.audit_inputs`); errors naming the file and what is wrong."""
    from .run.client_config import audit_inputs
    return audit_inputs(request.bootstrap, None, request.client_config, request.app_config, request.app_format,
                        request.app_role, "kafkaproof audit: name the cluster with --bootstrap (or bootstrap.servers "
                                          "in --client-config, or the bootstrap servers of --app-config)")


# --- running -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Item:
    """One run of a batch: the class, the fault, the scenario file, and the trial it belongs to (None: matrix)."""

    label: str
    fault: str
    path: Path
    trial: FixTrial | None = None


def _overrides(request: AuditRequest):
    """The runs' overrides: the backend, when not the default local one."""
    from .run.resolved import Overrides
    return Overrides(backend=request.backend if request.backend != "local" else None)


def _run_items(items: list[_Item], batch_id: str, request: AuditRequest) -> list[dict[str, Any]]:
    """Run `items` as one batch (one spark-submit) under `out/runs`; their RunRows, in order."""
    from . import batch
    from .report import data as report_data
    from .spec.scenario import load
    plan = batch.BatchPlan([batch.PlannedRun(load(i.path), i.label, _overrides(request)) for i in items])
    result = batch.run_batch(plan, batch_id, out=request.out / "runs")
    rows = []
    for item, summary in zip(items, result.summaries):
        outcome = report_data.run_outcomes(summary.get("run_dir"))
        report = summary.get("report")
        if report and Path(report).is_relative_to(request.out):
            report = str(Path(report).relative_to(request.out))
        rows.append({"fault": item.fault, "scenario": summary.get("scenario") or item.path.stem,
                     "run_id": summary.get("run_id"), "run_dir": summary.get("run_dir"), "report": report,
                     "status": outcome["status"],
                     "error": summary.get("error") if outcome["status"] == "error" else None,
                     "counts": outcome["counts"], "first_wall": outcome["first_wall"]})
    return rows


def _search_fixes(plan: AuditPlan, matrix: dict[str, list[dict]], faults: tuple[str, ...], request: AuditRequest,
                  aid: str, wall: float) -> dict[str, FixSearch]:
    """The fix search of every failed class, in rounds of one batch each."""
    fixes_dir = request.out / "suite" / "fixes"
    searches = {}
    for cls in plan.classes:
        rows = matrix[cls.label]
        if class_verdict(rows) != "fail":
            continue
        failed = tuple(r["fault"] for r in rows if r["status"] == "failed")
        searches[cls.label] = FixSearch(cls.label, failed, tuple(f for f in faults if f not in failed),
                                        class_candidates(plan, cls, failed), request.max_fix_tries)
    by_label = {c.label: c for c in plan.classes}
    for round_no in itertools.count(1):  # ends: each round uses a candidate or confirms one
        trials = [t for s in searches.values() if (t := next_trial(s))]
        if not trials:
            break
        items: list[_Item] = []
        unchanged: dict[tuple[str, str], dict] = {}
        for trial in trials:
            cls = by_label[trial.label]
            for fault in trial.faults:
                fixed = fixed_document(plan, cls, fault, trial.fixes)
                if fixed is None:  # nothing of the fix applies to this fault: its matrix run stands
                    unchanged[(trial.label, fault)] = next(r for r in matrix[cls.label] if r["fault"] == fault)
                    continue
                fixes_dir.mkdir(parents=True, exist_ok=True)
                path = fixes_dir / file_name(fixed[0])
                path.write_text(scenario_text(plan, fixed[0], wall))
                items.append(_Item(trial.label, fault, path, trial))
        rows = _run_items(items, f"{aid}/fix-{round_no}", request) if items else []
        for trial in trials:
            ran = {r["fault"]: r for i, r in zip(items, rows) if i.trial == trial}
            trial_rows = [ran.get(f) or unchanged[(trial.label, f)] for f in trial.faults]
            searches[trial.label] = advance(searches[trial.label], trial, trial_rows)
    return searches


def _fix_entry(plan: AuditPlan, cls: ReliabilityClass, tried: TriedFix, faults: tuple[str, ...]) -> dict[str, Any]:
    changes: list[str] = []
    for fault in faults:
        fixed = fixed_document(plan, cls, fault, tried.fixes)
        changes += [c for c in (fixed[1] if fixed else ()) if c not in changes]
    return {"fixes": list(tried.fixes), "changes": changes, "outcome": tried.outcome, "runs": list(tried.rows)}


def run_audit(request: AuditRequest) -> AuditResult:
    """Discover, plan, write the suite, run the matrix on replicas, search fixes, write audit.json and audit.html.

    Bad input (files, an unreachable cluster, refused credentials or ACLs, a client property the client does
    not know, an unknown fault) raises a KafkaproofError saying what, before any replica starts."""
    from .cluster import discovery
    from .run.resolved import resolve
    from .spec.audit_findings import audit_findings
    from .spec.scenario import load
    started = time.time()
    aid = audit_id(started)
    out = Path(request.out).resolve()  # the run directories and reports are then absolute, under it
    request = dataclasses.replace(request, out=out)
    faults = matrix_faults(request.faults)
    bootstrap, connection, settings = read_inputs(request)
    inventory = discovery.discover(bootstrap, connection, topics=list(request.topics))
    plan = plan_audit(inventory, settings, request.max_classes)
    if not plan.classes:
        raise ScenarioError(f"kafkaproof audit: no topic to audit at {bootstrap}"
                            + (f" (--topics {','.join(request.topics)})" if request.topics else ""))
    suite = out / "suite"
    write_suite(plan, suite, started)
    items = [_Item(cls.label, fault, suite / file_name(class_scenario(plan, cls, fault)))
             for cls in plan.classes for fault in faults]
    resolve(load(items[0].path), _overrides(request))  # the team's property names checked, before any replica
    rows = _run_items(items, f"{aid}/matrix", request)
    matrix: dict[str, list[dict]] = {cls.label: [] for cls in plan.classes}
    for item, row in zip(items, rows):
        matrix[item.label].append(row)
    searches = _search_fixes(plan, matrix, faults, request, aid, started) if request.fixes else {}
    classes = []
    for cls in plan.classes:
        search = searches.get(cls.label)
        proven = search.proven if search else None
        classes.append({
            "label": cls.label, "topics": list(cls.topics), "settings": dict(cls.settings),
            "grouped": [dataclasses.asdict(g) for g in cls.grouped], "verdict": class_verdict(matrix[cls.label]),
            "runs": matrix[cls.label],
            "fix": None if proven is None else {k: v for k, v in _fix_entry(plan, cls, proven, faults).items()
                                                if k != "outcome"},
            "fixes_tried": [_fix_entry(plan, cls, t, faults) for t in (search.tried if search else ())]})
    verdict = audit_verdict([c["verdict"] for c in classes])
    errors = [f"{c['label']} {r['fault']}: {r['error'] or 'error'}" for c in classes for r in c[RUNS]
              if r["status"] == "error"]
    audit = {"kind": "kafkaproof-audit", "schema": SCHEMA, "audit_id": aid, "started_wall": started,
             "finished_wall": time.time(), "bootstrap": bootstrap, "verdict": verdict,
             "exit_code": VERDICT_EXIT[verdict], "errors": errors, "inventory": inventory.to_dict(),
             "client_settings": settings.to_dict(redact=True) if settings else None, "plan": plan.to_dict(),
             "findings": [f.to_dict() for f in audit_findings(inventory, settings, plan)],
             "faults": {f: FAULTS[f] for f in faults}, "suite_dir": str(suite), "classes": classes,
             "excluded": dict(plan.excluded)}
    return write_audit(audit, out)


def write_audit(audit: dict[str, Any], out: Path) -> AuditResult:
    """Write audit.json and audit.html into `out`; the result with the lines the CLI prints."""
    from .report.audit_page import write_audit_page
    out.mkdir(parents=True, exist_ok=True)
    audit = json.loads(json.dumps(audit, default=str))  # what the file holds, also in the result (lists, not tuples)
    json_path = out / "audit.json"
    json_path.write_text(json.dumps(audit, indent=2) + "\n")
    html_path = write_audit_page(audit, out)
    return AuditResult(audit, json_path, Path(html_path), audit["verdict"], audit_lines(audit, Path(html_path)))


# --- the text the CLI prints ---------------------------------------------------------------------

def outcome_text(row: Mapping[str, Any]) -> str:
    """Pure: a run's anomalies: each kind with its count and its own first time in UTC (`error: ...`)."""
    if row["status"] == "error":
        return f"error: {row.get('error') or 'see the run report'}"
    kinds = [f"{kind} {n:,}" + (f" (first {utc_text(row['first_wall'][kind])})" if kind in row["first_wall"] else "")
             for kind, n in row["counts"].items()]
    return ", ".join(kinds) or ("passed" if row["status"] == "passed" else "failed (see the run report)")


def audit_lines(audit: Mapping[str, Any], html_path: Path) -> list[str]:
    """Pure: what `kafkaproof audit` prints: high and medium findings, one line per topic (its verdict and, per
    fault that did not pass, each anomaly kind with its count and first time), the proven fixes, the page."""
    lines = [f"audit {audit['audit_id']} of {audit['bootstrap']}: {audit['verdict'].upper()}"]
    lines += [f"{f['severity'].upper():<6} {f['subject']}: {f['text']}" for f in audit["findings"]
              if f["severity"] in ("high", "medium")]
    width = max([len(t) for c in audit["classes"] for t in c["topics"]] + [10])
    for c in audit["classes"]:
        bad = [f"{r['fault']}: {outcome_text(r)}" for r in c[RUNS] if r["status"] != "passed"]
        for topic in c["topics"]:
            lines.append(f"{topic:<{width}} {c['verdict'].upper():<5} [{c['label']}] " + ("; ".join(bad) or
                         "no loss under " + ", ".join(r["fault"] for r in c[RUNS])))
    for c in audit["classes"]:
        if c["fix"]:
            lines.append(f"proven fix for {c['label']} ({', '.join(c['topics'])}): {'+'.join(c['fix']['fixes'])}: "
                         + "; ".join(c["fix"]["changes"]))
        elif c["verdict"] == "fail":
            tried = ", ".join(f"{'+'.join(t['fixes'])} {t['outcome']}" for t in c["fixes_tried"])
            lines.append(f"no fix proven for {c['label']}" + (f" (tried: {tried})" if tried else ""))
    lines += [f"error: {e}" for e in audit["errors"]]
    lines.append(f"report: {html_path}")
    return lines

