"""The batch page: one row per scenario of a batch (a night, a DAG run), worst first, with the change since
the previous batch; what failed the gate and what only warned; for a run of an application, its view
(events accepted, processed, accepted but never in Kafka) under the scenario's name."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..verdict import history
from ..verdict.summary import judge_run
from .data import REPORT_DIR, key_numbers
from .kit import (VERDICT_RANK, Markup, badge, bullets, esc, fmt_ms, fmt_num, link, none_note, now_utc, page, plural,
                   rel_href, table, tag, write_html)


BATCHES_DIR = "batches"


def safe_batch_id(batch_id: str) -> str:
    """A directory name for a batch id (`dag_id/run_id` has slashes, colons, plus signs)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", batch_id).strip("._") or "batch"
    if len(safe) > 120 or safe != batch_id:
        digest = hashlib.sha1(batch_id.encode()).hexdigest()[:8]
        safe = f"{safe[:110]}-{digest}"
    return safe


def batch_dir(batch_id: str, out: Path) -> Path:
    return Path(out) / BATCHES_DIR / safe_batch_id(batch_id)


def change_since(previous: str | None, now: str) -> tuple[str, str]:
    """(text, css class) describing a verdict change since the previous batch."""
    if previous is None:
        return "first run", "same"
    if previous == now:
        return ("unchanged", "same") if now == "pass" else (f"still {'failing' if now == 'fail' else 'in error'}", "worse")
    if VERDICT_RANK.get(now, 2) > VERDICT_RANK.get(previous, 2):
        if previous != "pass":
            return f"now {now} (was {previous})", "worse"
        return (f"NEW {'FAILURE' if now == 'fail' else 'ERROR'} (was {previous})", "worse")
    return (f"fixed (was {previous})" if now == "pass" else f"now {now} (was {previous})", "better")


def previous_rows(summaries: Sequence[Mapping[str, Any]], batch_id: str, url: str | None = None
                  ) -> tuple[dict[tuple[str, str | None], dict], str | None]:
    """Per (scenario, label): the most recent history row not in this batch (and older than this run)."""
    own_runs = {s.get("run_id") for s in summaries if s.get("run_id")}
    out: dict[tuple[str, str | None], dict] = {}
    try:
        for s in summaries:
            rows = history.runs(scenario=s["scenario"], limit=200, url=url)
            out[(s["scenario"], s.get("label"))] = pick_previous(rows, batch_id, own_runs, s.get("run_id"),
                                                                  s.get("kafka_version") if s.get("label") else None)
    except Exception as e:  # noqa: BLE001 - the page still renders without the comparison
        return out, f"results history unavailable ({type(e).__name__}: {e})"
    return out, None


def pick_previous(rows: Sequence[Mapping[str, Any]], batch_id: str, own_runs: set, run_id: str | None,
                  kafka_version: str | None = None) -> dict | None:
    """Pure: from history rows (newest first), the first one from another batch, older than `run_id` if listed."""
    ids = [r.get("run_id") for r in rows]
    start = ids.index(run_id) + 1 if run_id in ids else 0
    for r in rows[start:]:
        if r.get("batch_id") == batch_id or r.get("run_id") in own_runs:
            continue
        if kafka_version and r.get("kafka_version") != kafka_version:
            continue
        return dict(r)
    return None


def summary_problems(s: Mapping[str, Any]) -> list[str]:
    """What went wrong for one scenario, in plain lines (read from its run directory if the summary is silent)."""
    violations = list(s.get("violations") or [])
    error = s.get("error")
    if s.get("verdict") in ("fail", "error") and not violations and not error and s.get("run_dir"):
        on_disk = judge_run(s["run_dir"], s["scenario"])
        violations, error = on_disk.violations, on_disk.error
    out = [f"error: {error}"] if error else []
    out += violations
    out += [f"regression: {r}" for r in s.get("regressions") or []]
    return out


def summary_notes(s: Mapping[str, Any]) -> list[str]:
    """What only warns (never fails the gate): drift on a thin baseline, unstable metrics, new allowed kinds."""
    notes = [f"warning: {w}" for w in s.get("warnings") or []]
    baseline = s.get("baseline") or ""
    if " of " in baseline:  # a thin baseline: no regression verdict yet
        notes.append(baseline)
    return notes


def summary_report(s: Mapping[str, Any]) -> Path | None:
    """The run report of a summary: its `report`, else `<run_dir>/report/index.html` if it exists."""
    if s.get("report"):
        return Path(s["report"])
    if s.get("run_dir"):
        p = Path(s["run_dir"]) / REPORT_DIR / "index.html"
        return p if p.exists() else None
    return None


def nonzero_anomalies(s: Mapping[str, Any]) -> str:
    k = key_numbers(s.get("metrics"))
    return ", ".join(f"{kind} {n:,}" for kind, n in (k["counts"] or {}).items() if n) or "–"


def verdict_counts(summaries: Sequence[Mapping[str, Any]]) -> str:
    n = {v: sum(1 for s in summaries if s.get("verdict") == v) for v in ("pass", "fail", "error")}
    return f"{plural(len(summaries), 'scenario run')}: {n['pass']} pass, {n['fail']} fail, {n['error']} error"


def batch_rows(summaries: Sequence[Mapping[str, Any]], previous: Mapping[tuple[str, str | None], dict | None],
               here: Path) -> list[tuple]:
    rows = []
    for s in sort_summaries(summaries):
        prev = previous.get((s["scenario"], s.get("label")))
        text, cls = change_since(prev.get("verdict") if prev else None, s.get("verdict") or "error")
        prev_link = Markup("")
        if prev and prev.get("report") and Path(prev["report"]).exists():
            prev_link = Markup(" " + link(rel_href(Path(prev["report"]), here), "previous"))
        report = summary_report(s)
        k = key_numbers(s.get("metrics"))
        expect = "pass" if (s.get("expect") or "pass") == "pass" else "negative control"
        name = link(rel_href(report, here), s["scenario"]) if report else esc(s["scenario"])
        rows.append((
            name + tag("div", (s.get("run_id") or "no run") + reused_note(s), class_="detail") + application_note(s),
            s.get("kafka_version") or "–", f"{s.get('guarantee') or '–'} / {expect}", badge(s.get("verdict")),
            Markup(tag("span", text, class_=f"chg {cls}") + prev_link),
            problems_cell(summary_problems(s) + summary_notes(s)),
            nonzero_anomalies(s), fmt_num(k["recovery_s"], 1, "s"), fmt_ms(k["p99_ms"]),
            link(rel_href(report, here), "report") if report else "no report"))
    return rows


def application_note(s: Mapping[str, Any]) -> Markup:
    """The application's view of an application's run (`pipeline.application_lead`, its run page's lead), as a
    line under its name; nothing for other runs."""
    return tag("div", s["application"], class_="app") if s.get("application") else Markup("")


def reused_note(s: Mapping[str, Any]) -> str:
    """Pure: ' · cluster reused after N scenarios' when the run had a cluster earlier scenarios used."""
    before = s.get("reused_after") or []
    return f" · cluster reused after {plural(len(before), 'scenario')}" if before else ""


def problems_cell(problems: Sequence[str]) -> Markup:
    if not problems:
        return esc("–")
    return esc(problems[0]) if len(problems) == 1 else bullets(problems)


def sort_summaries(summaries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Worst first (error, fail, pass), then by scenario name."""
    return sorted(summaries, key=lambda s: (-VERDICT_RANK.get(s.get("verdict") or "error", 2), s["scenario"],
                                            s.get("label") or "", s.get("run_id") or ""))


def render_batch(summaries: Sequence[Mapping[str, Any]], batch_id: str, previous: Mapping, history_error: str | None,
                 here: Path) -> str:
    """The batch index page."""
    worst = max((VERDICT_RANK.get(s.get("verdict") or "error", 2) for s in summaries), default=2)
    status = {0: "pass", 1: "fail", 2: "error"}[worst]
    regressions = sum(len(s.get("regressions") or []) for s in summaries)
    warnings = sum(len(s.get("warnings") or []) for s in summaries)
    changes = [(s, change_since((previous.get((s["scenario"], s.get("label"))) or {}).get("verdict"),
                                s.get("verdict") or "error")) for s in sort_summaries(summaries)]
    moved = [f"{s['scenario']}: {text}" for s, (text, cls) in changes if cls in ("worse", "better")
             and not text.startswith("still")]
    head = [tag("h1", f"Batch {batch_id}"), tag("div", f"generated {now_utc()}", class_="sub"),
            tag("section", [tag("h2", f"{status.upper()}: {verdict_counts(summaries)}"
                                      + (f", {plural(regressions, 'regression')}" if regressions else "")
                                      + (f", {plural(warnings, 'warning')} (not failing)" if warnings else "")),
                            bullets(moved) if moved else tag("div", "No verdict changed since the previous batch."
                                                             if not history_error else history_error)],
                class_=f"verdict {status}")]
    if not summaries:
        head.append(none_note("This batch has no scenario results (every scenario failed before summarising)."))
    hdr = ["scenario", "Kafka", "guarantee / expect", "verdict", "since previous batch", "what went wrong",
           "anomalies", "recovery", "p99", ""]
    head.append(tag("h2", "Scenarios (worst first)"))
    head.append(table(hdr, batch_rows(summaries, previous, here), numeric=[7, 8]))
    return page(f"{status.upper()} batch {batch_id} — kafkaproof", head)


def write_batch_report(summaries: list[dict], batch_id: str, out: Path, history_url: str | None = None) -> Path:
    """Write `<out>/batches/<safe batch id>/index.html`: scenario × verdict with change since the previous batch.

    `summaries` are `pipeline.ScenarioSummary` dicts (None entries are skipped); the previous
    verdict of each scenario is the most recent results-history row of another batch.
    """
    summaries = [s for s in summaries if s]
    here = batch_dir(batch_id, out)
    previous, err = previous_rows(summaries, batch_id, history_url)
    return write_html(here / "index.html", render_batch(summaries, batch_id, previous, err, here))
