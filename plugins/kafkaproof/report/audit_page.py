"""audit.html: an audit's report page, from its audit.json (docs/audit.md, docs/reports.md).

Verdict first, with the cluster (bootstrap, Kafka release, nodes, when it was discovered); then what the
settings mean before any run (the broker findings, then the client findings); then one row per topic:
its config, per fault of the matrix what its class's replica run saw (counts per kind and the first time
of each, a link to the run's report), its class and the proven fix; then the fixes tried, how topics were
grouped into classes (`--max-classes`), the excluded topics and the notes. Self-contained like the other
pages (report/kit.py); everything from the document is escaped, and nothing missing is printed as a
Python value: the page says it in words.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..spec.audit_plan import looks_auto_created, utc_text as utc
from ..spec.inventory import ClusterInventory
from .batch_page import safe_batch_id
from .kit import Markup, badge, bullets, esc, join, kv, link, none_note, page, plural, rel_href, table, tag, write_html

PAGE = "audit.html"
AUDITS_DIR = "audits"  # under the runs directory: one directory per audit of the kafka_cluster_audit DAG
# Outcome kinds (report.data.run_outcomes' keys, and the anomaly vocabulary's) in words; others are shown as they are.
KIND_WORDS = {"lost": "lost", "lost_unconfirmed": "lost (acks=0, never acknowledged)",
              "not_delivered": "not delivered", "undelivered_attempts": "not delivered (attempted)",
              "duplicated": "duplicated", "duplicates": "duplicated", "observed_duplicates": "seen twice",
              "reordered": "reordered", "reordering": "reordered", "redeliveries": "redelivered",
              "reprocessed": "processed twice", "aborted_reads": "aborted but read", "dirty_reads": "dirty reads",
              "unseen": "not checked (drain incomplete)", "unknown_values": "unknown values"}
STATUS_WORDS = {"passed": "passed", "failed": "failed", "error": "error"}
SEVERITY_CLASS = {"high": "notmet", "medium": "", "low": "muted"}
FIX_OUTCOME_VERDICT = {"passed": "pass", "failed": "fail", "error": "error"}
# audit.json's key of a class's (or a fix's) run rows; named, as the cluster state file has a key of that name
# too, which no module but cluster/state.py reads off a dict (tests/unit/test_architecture.py).
RUNS = "runs"


def words(value: Any, missing: str = "not set") -> str:
    """A value as text for a person: `missing` for None, a non-number as words, booleans as yes/no, lists joined."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not math.isfinite(value):
        return "not a number" if math.isnan(value) else "unbounded"
    if isinstance(value, (list, tuple)):
        return ", ".join(words(v, missing) for v in value) or "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={words(v, missing)}" for k, v in value.items()) or "none"
    return str(value)


def kind_words(kind: str) -> str:
    return KIND_WORDS.get(kind, kind)


def _inventory(audit: Mapping[str, Any]) -> ClusterInventory | None:
    """The document's inventory, None when discovery did not get that far (or it cannot be read)."""
    try:
        return ClusterInventory.from_dict(audit["inventory"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def report_href(report: str | None, out_dir: Path) -> str | None:
    """A RunRow's report as a link from the page: relative paths are already relative to the audit's directory."""
    if not report:
        return None
    path = Path(report)
    return rel_href(path, out_dir) if path.is_absolute() else path.as_posix()


# --- sections ------------------------------------------------------------------------------

def section_header(audit: Mapping[str, Any], inv: ClusterInventory | None) -> Markup:
    nodes = "not read"
    if inv is not None:
        nodes = plural(len(inv.nodes), "node") + (": " if inv.nodes else "") + ", ".join(
            f"{n.id} {n.host}:{n.port} ({'+'.join(n.roles) if n.roles else 'roles not read'})" for n in inv.nodes)
    sub = [f"audit {words(audit.get('audit_id'), 'without an id')}",
           f"started {utc(audit.get('started_wall'))}", f"finished {utc(audit.get('finished_wall'))}"]
    facts = [("bootstrap", words(audit.get("bootstrap"), "not given")),
             ("cluster id", words(inv.cluster_id if inv else None, "not read")),
             ("discovered", utc(inv.discovered_wall if inv else None)),
             ("Kafka", words(inv.kafka_release if inv else None, "release not read")
              + (f" (metadata.version {inv.metadata_version})" if inv and inv.metadata_version else "")),
             ("nodes", nodes)]
    plan = audit.get("plan") or {}
    if plan:
        facts.append(("replica", f"Kafka {words(plan.get('kafka_version'), 'version not planned')}, "
                                 f"{plural(int(plan.get('brokers') or 0), 'broker')}"
                                 + (f" + {plural(int(plan['controllers']), 'controller')}" if plan.get("controllers")
                                    else "") + f", {words(plan.get('client'), 'client not planned')} clients"))
    faults = audit.get("faults") or {}
    if faults:
        facts.append(("fault matrix", ", ".join(faults)))
    if audit.get("suite_dir"):
        facts.append(("scenario files", audit["suite_dir"]))
    title = inv.cluster_id if inv and inv.cluster_id else words(audit.get("bootstrap"), "a cluster")
    return join([tag("h1", f"Audit of {title}"), tag("div", " · ".join(sub), class_="sub"), tag("div", kv(facts),
                                                                                               class_="card")])


def class_line(cls: Mapping[str, Any]) -> tuple[str, str]:
    """(css class, one line) of a class in the verdict box."""
    topics = ", ".join(cls.get("topics") or []) or "no topics"
    verdict = cls.get("verdict") or "error"
    bad = [r for r in cls.get(RUNS) or [] if r.get("status") != "passed"]
    what = "passed every fault" if verdict == "pass" and not bad else "; ".join(
        f"{r.get('fault')}: {outcome_text(r)}" for r in bad) or verdict
    fix = cls.get("fix")
    tail = f"; proven fix: {'; '.join(fix.get('changes') or fix.get('fixes') or [])}" if fix else ""
    return ("good" if verdict == "pass" else "bad"), f"{cls.get('label')} ({topics}): {what}{tail}"


def outcome_text(row: Mapping[str, Any]) -> str:
    """Pure: a run's outcome as words: 'passed', the counts per kind, or the error."""
    status = row.get("status") or "error"
    if status == "error":
        return f"error: {words(row.get('error'), 'no reason recorded')}"
    counts = {k: n for k, n in (row.get("counts") or {}).items() if n}
    if not counts:
        return STATUS_WORDS.get(status, status)
    return ", ".join(f"{kind_words(k)} {int(n):,}" for k, n in counts.items())


def section_verdict(audit: Mapping[str, Any]) -> Markup:
    verdict = audit.get("verdict") if audit.get("verdict") in ("pass", "fail", "error") else "error"
    classes = audit.get("classes") or []
    topics = sum(len(c.get("topics") or []) for c in classes)
    failed = [c for c in classes if c.get("verdict") == "fail"]
    fixed = [c for c in failed if c.get("fix")]
    if verdict == "pass":
        head = (f"PASS: no topic lost, missed or duplicated events under the fault matrix "
                f"({plural(len(classes), 'class', 'classes')}, {plural(topics, 'topic')})")
    elif verdict == "fail":
        head = (f"FAIL: {len(failed)} of {plural(len(classes), 'reliability class', 'reliability classes')} failed "
                f"({plural(sum(len(c.get('topics') or []) for c in failed), 'topic')}); "
                f"a fix proven for {len(fixed)}")
    else:
        head = "ERROR: the audit could not give a verdict for every topic"
    items = [tag("li", text, class_=cls) for cls, text in map(class_line, classes)]
    items += [tag("li", e, class_="bad") for e in audit.get("errors") or []]
    return tag("section", [tag("h2", head), tag("ul", items) if items else Markup("")], class_=f"verdict {verdict}",
               id="verdict")


def findings_table(findings: Sequence[Mapping[str, Any]], with_subject: bool) -> Markup:
    rows = [((tag("span", f.get("severity"), class_=SEVERITY_CLASS.get(f.get("severity"), "")),)
             + ((f.get("subject"),) if with_subject else ())
             + (f.get("setting"), words(f.get("value")), f.get("text"))) for f in findings]
    return table(["severity", *(["about"] if with_subject else []), "setting", "value", "what it means"], rows)


def section_findings(audit: Mapping[str, Any]) -> Markup:
    findings = audit.get("findings") or []
    out = [tag("h2", "What the settings mean (before any run)")]
    for scope, title in (("broker", "Broker settings"), ("client", "Client settings")):
        own = [f for f in findings if f.get("scope") == scope]
        out.append(tag("h3", title))
        out.append(findings_table(own, scope == "client") if own else none_note(f"No {scope} finding."))
    settings = audit.get("client_settings")
    if settings:
        out.append(tag("div", f"client settings from {words(settings.get('source'), 'a file')} "
                              f"({words(settings.get('format'), 'format unknown')}, "
                              f"{words(settings.get('client'), 'client unknown')} property names)", class_="detail"))
    return join(out)


def run_cell(row: Mapping[str, Any] | None, out_dir: Path) -> Markup:
    """A topic's outcome under one fault: status or counts, each kind's first time, the run's report."""
    if row is None:
        return esc("not run")
    status = row.get("status") or "error"
    parts = [tag("span", outcome_text(row), class_={"passed": "held"}.get(status, "notmet"))]
    first = row.get("first_wall") or {}
    times = [f"first {kind_words(k)} {utc(first[k])}" for k in (row.get("counts") or {}) if k in first]
    if times:
        parts.append(tag("div", "; ".join(times), class_="detail"))
    href = report_href(row.get("report"), out_dir)
    parts.append(tag("div", link(href, "run report") if href else "no run report", class_="detail"))
    return join(parts)


def fix_cell(cls: Mapping[str, Any]) -> Markup:
    fix = cls.get("fix")
    if fix:
        return join([tag("strong", "proven: "), esc("; ".join(fix.get("changes") or fix.get("fixes") or []))])
    if cls.get("verdict") == "pass":
        return esc("none needed")
    if cls.get("fixes_tried"):
        return esc("no fix on the list passed")
    return esc("not tried" + (" (its runs ended in error)" if cls.get("verdict") == "error" else ""))


def topic_config(name: str, inv: ClusterInventory | None) -> str:
    """A topic's partitions, RF, min ISR, cleanup and whether it looks auto-created, in words."""
    try:
        t = inv.topic(name) if inv else None
    except KeyError:
        t = None
    if t is None:
        return "not read"
    return (f"{plural(t.partitions, 'partition')}, RF {t.replication_factor}, "
            f"min ISR {words(t.min_insync_replicas, 'not read')}, cleanup {words(t.config.get('cleanup.policy'))}"
            + (", looks auto-created" if looks_auto_created(t, inv.broker_config) else ""))


def section_topics(audit: Mapping[str, Any], inv: ClusterInventory | None, out_dir: Path) -> Markup:
    faults = list(audit.get("faults") or {})
    findings = audit.get("findings") or []
    rows = []
    for cls in audit.get("classes") or []:
        by_fault = {r.get("fault"): r for r in cls.get(RUNS) or []}
        for name in cls.get("topics") or []:
            own = [f"{f.get('severity')}: {f.get('text')}" for f in findings
                   if f.get("scope") == "topic" and f.get("subject") == name]
            rows.append((tag("strong", name), topic_config(name, inv),
                         *[run_cell(by_fault.get(fault), out_dir) for fault in faults],
                         join([badge(cls.get("verdict")), tag("div", cls.get("label"), class_="detail")]),
                         fix_cell(cls), bullets(own) if own else esc("none")))
    out = [tag("h2", "Topics: what the replica runs saw under each fault")]
    if faults:
        out.append(tag("div", "; ".join(f"{f}: {d}" for f, d in (audit.get("faults") or {}).items()), class_="detail"))
    if not rows:
        return join(out + [none_note("No topic was run on a replica (see the verdict for why).")])
    return join(out + [table(["topic", "config", *faults, "class", "fix", "findings"], rows)])


def section_fixes(audit: Mapping[str, Any], out_dir: Path) -> Markup:
    rows = []
    for cls in audit.get("classes") or []:
        for tried in cls.get("fixes_tried") or []:
            runs = join(tag("div", [f"{r.get('fault')}: ", link(report_href(r.get("report"), out_dir),
                                                                 outcome_text(r))]) for r in tried.get(RUNS) or [])
            outcome = tried.get("outcome") or "not confirmed"
            rows.append((cls.get("label"), "+".join(tried.get("fixes") or []) or "none",
                         bullets(tried.get("changes") or []) if tried.get("changes") else esc("no change"),
                         badge(FIX_OUTCOME_VERDICT.get(outcome)) if outcome in FIX_OUTCOME_VERDICT else esc(outcome),
                         runs or esc("no run")))
    out = [tag("h2", "Fixes tried (smallest first; a fix is proven only when the whole matrix passes with it)")]
    return join(out + [table(["class", "fixes", "changes", "outcome", "runs"], rows) if rows
                       else none_note("No fix was tried.")])


def section_classes(audit: Mapping[str, Any]) -> Markup:
    classes = audit.get("classes") or []
    out = [tag("h2", "Reliability classes")]
    rows = [(c.get("label"), ", ".join(c.get("topics") or []) or "none",
             words({k: v for k, v in (c.get("settings") or {}).items() if v is not None})) for c in classes]
    out.append(table(["class", "topics", "settings"], rows) if rows else none_note("No class was planned."))
    grouped = [(g.get("topic"), c.get("label"), words(g.get("from_class"), "unknown"), words(g.get("differs") or {}))
               for c in classes for g in c.get("grouped") or []]
    if grouped:
        max_classes = (audit.get("plan") or {}).get("max_classes")
        out.append(tag("h3", f"Grouped topics (--max-classes {words(max_classes, 'set')}): each ran with its "
                             "class's settings, not its own"))
        out.append(table(["topic", "ran in class", "its own class", "settings that differed (its own values)"],
                         grouped))
    excluded = audit.get("excluded") or {}
    if excluded:
        out.append(tag("h3", "Excluded topics"))
        out.append(table(["topic", "why"], sorted(excluded.items())))
    return join(out)


def section_notes(audit: Mapping[str, Any], inv: ClusterInventory | None) -> Markup:
    notes = [*(inv.notes if inv else ()), *((audit.get("plan") or {}).get("notes") or []),
             *((audit.get("client_settings") or {}).get("notes") or [])]
    return join([tag("h2", "Notes"), bullets(notes)]) if notes else Markup("")


def render_audit(audit: Mapping[str, Any], out_dir: Path) -> str:
    """The page's HTML for an audit document."""
    inv = _inventory(audit)
    verdict = audit.get("verdict") if audit.get("verdict") in ("pass", "fail", "error") else "error"
    body = [section_header(audit, inv), section_verdict(audit), section_findings(audit),
            section_topics(audit, inv, out_dir), section_fixes(audit, out_dir), section_classes(audit),
            section_notes(audit, inv)]
    title = inv.cluster_id if inv and inv.cluster_id else words(audit.get("bootstrap"), "a cluster")
    return page(f"{verdict.upper()} audit of {title} — kafkaproof", body)


def audit_dir_name(run_id: str) -> str:
    """The directory under `$KAFKAPROOF_RUNS/audits` of a DAG run's audit (its run id made a safe name)."""
    return safe_batch_id(run_id)


def list_audits(runs: str | Path) -> list[dict[str, Any]]:
    """The audits under `runs`/audits (each directory with an audit.json), newest first: directory name, audit
    id, bootstrap, verdict, when it finished (UTC text) and whether its audit.html is there; an unreadable
    audit.json is listed with verdict 'unreadable'."""
    found = []
    for path in Path(runs).glob(f"{AUDITS_DIR}/*/audit.json"):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError):
            doc = {"verdict": "unreadable"}
        found.append({"dir": path.parent.name, "audit_id": words(doc.get("audit_id"), path.parent.name),
                      "bootstrap": words(doc.get("bootstrap"), "unknown"),
                      "verdict": words(doc.get("verdict"), "unknown"),
                      "finished": utc(doc.get("finished_wall")), "page": (path.parent / PAGE).exists(),
                      "mtime": path.stat().st_mtime})
    return sorted(found, key=lambda a: a["mtime"], reverse=True)


def write_audit_page(audit: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write `out_dir`/audit.html for the audit document `audit` (the content of audit.json); returns its path."""
    out = Path(out_dir)
    return write_html(out / PAGE, render_audit(audit, out))
