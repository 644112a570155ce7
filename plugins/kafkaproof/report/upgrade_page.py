"""The upgrade page: each scenario on the current and the candidate Kafka version, side by side."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ..errors import LedgerError
from ..spec import ledger
from ..spec.client_upgrade import shown_default
from ..spec.faults import ROLLING_KINDS

from .batch_page import (application_note, batch_dir, change_since, nonzero_anomalies, summary_problems,
                         summary_report)
from .data import key_numbers
from .kit import (Markup, badge, bullets, esc, fmt_ms, fmt_num, join, link, now_utc, page, plural, rel_href, table,
                   tag, write_html)
from .verdict_text import ordered_kinds


def rolling_facts(faults: pd.DataFrame, sends: pd.DataFrame) -> dict[str, Any]:
    """Pure: what a rolling run's part of the upgrade page says: each node's step (versions, time out of
    service, time until back in its ISRs), the roll's length, the longest intended→ack time of a value
    meant to be sent during it, and the finalisation."""
    rolls = faults[faults["kind"].isin(ROLLING_KINDS)]
    steps = faults[faults["kind"] == "roll_node"].sort_values("start_ns")
    nodes = []
    for r in steps.to_dict("records"):
        effect = json.loads(r["effect"] or "{}")
        step, params = effect.get("step") or {}, json.loads(r["params"] or "{}")
        nodes.append({"node": int(list(r["nodes"])[0]), "from": params.get("from"), "to": params.get("to"),
                      "out_s": step.get("out_s"),
                      "caught_up_s": step.get("caught_up_s"), "error": effect.get("effect_error")})
    facts: dict[str, Any] = {"nodes": nodes, "roll_s": None, "max_ack_ms": None, "finalized": None}
    if len(rolls):
        start, end = int(rolls["start_ns"].min()), int(rolls["heal_ns"].max())
        facts["roll_s"] = (end - start) / 1e9
        during = sends[(sends["intended_ns"] >= start) & (sends["intended_ns"] <= end) & (sends["outcome"] == "ok")]
        if len(during):
            facts["max_ack_ms"] = float((during["complete_ns"] - during["intended_ns"]).max()) / 1e6
            facts["acked_during"] = len(during)
    for r in faults[faults["kind"] == "finalize_features"].to_dict("records"):
        facts["finalized"] = json.loads(r["effect"] or "{}").get("step") or {"finalized": False}
    return facts


def load_rolling_facts(run_dir: str | Path | None) -> dict[str, Any] | None:
    """`rolling_facts` of a run directory; None when its ledger cannot be read."""
    if not run_dir:
        return None
    try:
        faults = ledger.read_table(Path(run_dir), "faults").to_pandas()
        sends = ledger.read_table(Path(run_dir), "sends").select(
            ["intended_ns", "complete_ns", "outcome"]).to_pandas()
    except (LedgerError, OSError):
        return None
    return rolling_facts(faults, sends)


def render_rolling(s: Mapping[str, Any], facts: Mapping[str, Any] | None, here: Path) -> list:
    """The part of the upgrade page on one rolling run: verdict, nodes, latency during the roll, finalisation."""
    report = summary_report(s)
    head = tag("h3", [esc(f"{s['scenario']}: rolling upgrade from {s.get('kafka_version') or '?'} "), badge(s.get("verdict")),
                      esc(" "), link(rel_href(report, here), "report") if report else esc("no report")])
    out = [head]
    problems = summary_problems(s)
    if problems:
        out.append(bullets(problems))
    if not facts:
        out.append(tag("div", "the run's ledger could not be read", class_="detail"))
        return out
    lines = []
    if facts["roll_s"] is not None:
        lines.append(f"{plural(len(facts['nodes']), 'node')} rolled one at a time in {fmt_num(facts['roll_s'], 1, 's')}")
    if facts["max_ack_ms"] is not None:
        lines.append(f"longest intended→ack time of the {facts['acked_during']:,} values sent during the roll: "
                     f"{fmt_ms(facts['max_ack_ms'])}")
    fin = facts["finalized"]
    if fin is not None:
        lines.append(f"features finalised for release {fin.get('release')}: " + ", ".join(
            f"{k}={v}" for k, v in sorted((fin.get("levels") or {}).items())) if fin.get("finalized") else
            "features NOT finalised")
    out.append(bullets(lines))
    out.append(table(["node", "version", "out of service (stop → serving)", "back in its ISRs after its start"], [
        (str(n["node"]), f"{n['from']} → {n['to']}", fmt_num(n["out_s"], 1, "s"),
         fmt_num(n["caught_up_s"], 1, "s") if n["caught_up_s"] is not None else f"not back: {n['error']}")
        for n in facts["nodes"]]))
    return out


def upgrade_pairs(summaries: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping | None, Mapping | None]]:
    """Pure: (scenario, current summary, candidate summary) per scenario, sorted by name (rolling runs apart)."""
    by: dict[str, dict[str, Mapping]] = {}
    for s in summaries:
        if s.get("label") == "rolling":
            continue
        by.setdefault(s["scenario"], {})[s.get("label") or "current"] = s
    return [(name, d.get("current"), d.get("candidate")) for name, d in sorted(by.items())]


def version_of(pairs: Sequence[tuple[str, Mapping | None, Mapping | None]], index: int) -> str:
    versions = sorted({p[index].get("kafka_version") for p in pairs if p[index] and p[index].get("kafka_version")})
    return ", ".join(versions) or "?"


def upgrade_cell(s: Mapping | None, here: Path) -> Markup:
    if not s:
        return Markup(tag("span", "no result", class_="muted"))
    report = summary_report(s)
    k = key_numbers(s.get("metrics"))
    lines = [badge(s.get("verdict")), esc(" "), link(rel_href(report, here), "report") if report else esc("no report"),
             tag("div", f"recovery {fmt_num(k['recovery_s'], 1, 's')} · p99 {fmt_ms(k['p99_ms'])}", class_="detail"),
             tag("div", f"anomalies: {nonzero_anomalies(s)}", class_="detail"), application_note(s)]
    problems = summary_problems(s)
    if problems:
        lines.append(tag("div", "; ".join(problems), class_="detail"))
    return join(lines)


def version_change(cur: Mapping | None, cand: Mapping | None) -> tuple[str, str]:
    """Pure: the candidate's verdict against the current version's, as (text, css class)."""
    if cand is None:
        return "no result on the candidate version", "worse"
    if cur is None:
        return "no result on the current version to compare with", "worse"
    text, cls = change_since(cur.get("verdict"), cand.get("verdict") or "error")
    return ("same verdict", cls) if text in ("unchanged", "still failing", "still in error") else \
        (text.replace("(was", "(current"), cls)


def metric_deltas(cur: Mapping | None, cand: Mapping | None) -> list[str]:
    """Pure: key numbers of the candidate next to the current version's, and anomaly kinds only one of them has."""
    if not cur or not cand:
        return []
    a, b = key_numbers(cur.get("metrics")), key_numbers(cand.get("metrics"))
    out = []
    for key, label, fmt in (("recovery_s", "recovery", lambda v: fmt_num(v, 1, "s")), ("p99_ms", "p99", fmt_ms)):
        if a[key] is not None and b[key] is not None and a[key] != b[key]:
            out.append(f"{label} {fmt(b[key])} vs {fmt(a[key])}")
    ca, cb = a["counts"] or {}, b["counts"] or {}
    out += [f"new on the candidate: {k} {cb[k]:,}" for k in ordered_kinds(cb) if cb[k] and not ca.get(k)]
    out += [f"gone on the candidate: {k} (was {ca[k]:,})" for k in ordered_kinds(ca) if ca[k] and not cb.get(k)]
    return out


MAX_ONLY_SHOWN = 40  # properties only one version has, listed by name up to this many per role


def default_change_lines(diff: Mapping[str, Any] | None) -> list[str]:
    """Pure: one line per client default that changes for a scenario (`spec.client_upgrade.DefaultsDiff`
    JSON), e.g. "producer linger.ms default 0 → 5 (not set by the scenario)"."""
    if not diff:
        return []
    return [f"{c['role']} {c['name']} default {shown_default(c['current'])} → {shown_default(c['candidate'])} "
            f"(not set by the scenario)" for c in diff.get("changed") or []]


def render_client_defaults(versions: Sequence[Mapping[str, Any]]) -> list:
    """The page's section on the clients' defaults: per (current, candidate) kafka-clients pair, every
    declared default that differs and the properties only one version has, as the jars declare them."""
    out: list = []
    for d in versions:
        out.append(tag("h3", f"kafka-clients {d['current']} → {d['candidate']}: defaults read from the two jars"))
        changed = d.get("changed") or []
        if changed:
            out.append(table(["client", "property", f"default in {d['current']}", f"default in {d['candidate']}"],
                             [(c["role"], c["name"], shown_default(c["current"]), shown_default(c["candidate"]))
                              for c in changed]))
        else:
            out.append(tag("div", "no declared default differs", class_="detail"))
        only = []
        for key, version in (("only_current", d["current"]), ("only_candidate", d["candidate"])):
            for role, names in sorted((d.get(key) or {}).items()):
                shown = ", ".join(names[:MAX_ONLY_SHOWN]) + (f", … ({len(names) - MAX_ONLY_SHOWN} more)"
                                                             if len(names) > MAX_ONLY_SHOWN else "")
                only.append(f"{role}: {plural(len(names), 'property', 'properties')} only in {version}: {shown}")
        if only:
            out.append(bullets(only))
    return out


def client_cell_lines(fact: Mapping[str, Any] | None, side: str) -> list[str]:
    """Pure: the client libraries one side of a scenario ran on (the manifest's `client_versions`)."""
    return list(((fact or {}).get("clients") or {}).get(side) or [])


def render_upgrade(summaries: Sequence[Mapping[str, Any]], worse: Sequence[str], batch_id: str, here: Path,
                   clients: Mapping[str, Any] | None = None) -> str:
    """The upgrade comparison page: scenario × Kafka version, and why the candidate is worse. `clients`
    (`run.client_upgrade.client_upgrade_facts`): the libraries each side ran on and, for a client upgrade,
    the client defaults that differ next to each scenario's measured differences."""
    clients = clients or {}
    facts = clients.get("scenarios") or {}
    pairs = upgrade_pairs(summaries)
    cur_v, cand_v = version_of(pairs, 1), version_of(pairs, 2)
    if len(clients.get("versions") or []) == 1:  # a client upgrade: say so wherever the versions are named
        cur_v += f" with kafka-clients {clients['versions'][0]['current']}"
        cand_v += f" with kafka-clients {clients['versions'][0]['candidate']}"
    status = "fail" if worse else ("pass" if pairs or summaries else "error")
    rolls = [s for s in summaries if s.get("label") == "rolling"]
    roll_failed = any(s.get("verdict") != "pass" for s in rolls)
    headline = ("THE ROLLING UPGRADE DID NOT PASS" if roll_failed else
                f"CANDIDATE {cand_v} IS WORSE than {cur_v}" if worse else
                f"Candidate {cand_v} is no worse than {cur_v}" + (", and the rolling upgrade passed" if rolls else "")
                if pairs else "The rolling upgrade passed" if rolls else "No results to compare")
    body = [tag("h1", f"Upgrade check {batch_id}"), tag("div", f"generated {now_utc()}", class_="sub"),
            tag("section", [tag("h2", headline),
                            bullets(worse) if worse else tag("div", f"{plural(len(pairs), 'scenario')} compared.")],
                class_=f"verdict {status}")]
    if rolls:
        body.append(tag("h2", "The rolling upgrade, under load"))
        for s in rolls:
            body += render_rolling(s, load_rolling_facts(s.get("run_dir")), here)
    if clients.get("versions"):
        body.append(tag("h2", "Client upgrade: the defaults that change"))
        body += render_client_defaults(clients["versions"])
    rows = []
    for name, cur, cand in pairs:
        text, cls = version_change(cur, cand)
        deltas = metric_deltas(cur, cand)
        fact = facts.get(name) or {}
        defaults = default_change_lines(fact.get("diff"))
        if fact.get("error"):
            defaults.append(fact["error"])
        rows.append((name, join([upgrade_cell(cur, here), *[tag("div", c, class_="detail")
                                                            for c in client_cell_lines(fact, "current")]]),
                     join([upgrade_cell(cand, here), *[tag("div", c, class_="detail")
                                                       for c in client_cell_lines(fact, "candidate")]]),
                     join([tag("span", text, class_=f"chg {cls}"), *[tag("div", d, class_="detail") for d in deltas],
                           *[tag("div", d, class_="detail") for d in defaults]])))
    body.append(tag("h2", "Scenario × Kafka version"))
    body.append(table(["scenario", f"current ({cur_v})", f"candidate ({cand_v})", "candidate vs current"], rows))
    return page(f"{'WORSE' if worse else 'OK'} upgrade check {batch_id} — kafkaproof", body)


def write_upgrade_report(summaries: list[dict], worse: list[str], batch_id: str, out: Path,
                         clients: Mapping[str, Any] | None = None) -> Path:
    """Write `<out>/batches/<safe batch id>/index.html` comparing current vs candidate Kafka per scenario.

    `summaries` carry `label` 'current' or 'candidate'; `worse` lists why the candidate is
    worse (`pipeline.upgrade_differences`); `clients` what the clients ran on and, for a client upgrade,
    the defaults that changed (`run.client_upgrade.client_upgrade_facts`).
    """
    summaries = [s for s in summaries if s]
    here = batch_dir(batch_id, out)
    return write_html(here / "index.html", render_upgrade(summaries, list(worse), batch_id, here, clients))
