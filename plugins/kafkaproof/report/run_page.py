"""The run report: one self-contained page per scenario run, verdict first (docs/reports.md).

It reads what the run, the analysis and the validation wrote and never redoes the analysis:
a run without analysis says so. Whatever is missing (analysis, validation, ledger tables, the
manifest itself) is said on the page instead of failing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..spec.client_versions import read_client_versions, summary as client_summary
from ..spec.elr_evidence import elections, ids_text, leaderless_windows
from ..spec.group_protocol import protocol_text
from ..spec.connection import connection_text
from ..spec.ledger import MANIFEST, SIDE_TABLES, TABLES
from ..spec.pipeline_ledger import PIPELINE_TABLES
from ..spec.share_ledger import SHARE_TABLES
from .data import (DEFAULT_EXAMPLES, REPORT_DIR, RunData, expectation_of, guarantee_of, load_history, load_run, phases,
                   read_json, run_started_wall, run_t0, scenario_name, scenario_of)
from .kit import (VERDICT_COLORS, Markup, badge, bullets, esc, fmt_int, fmt_ms, fmt_num, fmt_t, fmt_value_id,
                   is_missing, join, kv, link, none_note, page, plural, rel_href, table, tag, write_html)
from .shaping import (PERCENTILE_KEYS, FaultWindow, KindSummary, TrendPoint, application_text, attribution_text,
                      delivered_text, delivery_text, error_rows, fault_windows, kind_summaries, latency_by_fault_rows, latency_rows, outcome_rows,
                      per_second, recovery_rows, trend_points)
from .svg import Timeline, build_timeline, svg_timeline, svg_trend
from .verdict_text import Verdict, anomaly_counts, build_verdict, ordered_kinds


@dataclass
class RunView:
    """Everything the run page shows, shaped."""

    data: RunData
    t0: int
    name: str
    verdict: Verdict
    counts: dict[str, int] | None
    windows: list[FaultWindow]
    timeline: Timeline
    kinds: list[KindSummary]
    history: list[dict]
    history_error: str | None
    trend: list[TrendPoint]
    report_dir: Path


def build_run_view(data: RunData, examples: int, history_url: str | None = None, with_history: bool = True) -> RunView:
    """Shape a loaded run for rendering (reads the results history unless `with_history` is False)."""
    m = data.manifest
    sends = data.tables.get("sends")
    t0 = run_t0(m, sends)
    counts = anomaly_counts(data.metrics, data.anomalies)
    verdict = build_verdict(m, data.validation, counts)
    windows = fault_windows(data.tables.get("faults"), t0)
    seconds, source = per_second(data.timeseries)
    run_phases = phases(m, t0)
    tl = build_timeline(data, t0, seconds, source, windows, run_phases)
    name = scenario_name(m) or data.run_dir.name
    kinds = kind_summaries(counts, data.anomalies, data.metrics, windows, t0, tl.end_s, examples)
    rows, err = load_history(scenario_name(m), history_url) if with_history else ([], None)
    run_id = (m or {}).get("run_id") or data.run_dir.name
    trend = trend_points(rows, run_id, data.metrics, verdict.status, ((m or {}).get("versions") or {}).get("kafka"))
    return RunView(data, t0, name, verdict, counts, windows, tl, kinds, rows, err, trend, data.run_dir / REPORT_DIR)


def section_header(v: RunView) -> Markup:
    m = v.data.manifest or {}
    versions = m.get("versions") or {}
    sub = [f"run {m.get('run_id') or v.data.run_dir.name}", f"started {run_started_wall(m)}",
           f"Kafka {versions.get('kafka') or '?'}", *client_summary(read_client_versions(m)),
           f"status {m.get('status') or '?'}"]
    return join([tag("h1", f"{v.name}"), tag("div", " · ".join(sub), class_="sub")])


def section_verdict(v: RunView) -> Markup:
    guarantee = guarantee_of(v.data.manifest) or "unknown"
    outcome, detect, why = expectation_of(v.data.manifest)
    claim = (f"Claims {guarantee}. Negative control: must detect {', '.join(detect)}." if outcome == "detect"
             else f"Claims {guarantee}; expected to pass.")
    items = [tag("li", text, class_=cls) for cls, text in v.verdict.lines]
    body = [tag("h2", v.verdict.headline)]
    app = view_application_text(v)
    if app:  # an application run leads with the application's view
        body.append(tag("div", tag("strong", app), class_="app"))
    delivered = delivered_text(v.data.manifest)
    if delivered:  # delivered (the proxies' Fetch answers), not processed; or why it was not measured
        body.append(tag("div", delivered, class_="app-delivered"))
    body.append(tag("div", claim + (f" Why: {why}" if why and outcome == "detect" else "")))
    if items:
        body.append(tag("ul", items))
    return tag("section", body, class_=f"verdict {v.verdict.status}", id="verdict")


def view_application_text(v: RunView) -> str | None:
    """The application's view of a shaped run (`shaping.application_text`), None without an application."""
    return application_text(v.data.manifest, v.data.metrics, next((k for k in v.kinds if k.kind == "lost"), None),
                            v.windows, v.timeline.end_s)


def application_lead(run_dir: Path) -> str | None:
    """The lead of a run's page for a run of an application (what the batch page shows beside its verdict):
    events accepted, processed, accepted but never in Kafka. None for a run without an application."""
    if not isinstance((read_json(Path(run_dir) / MANIFEST, []) or {}).get("application"), Mapping):
        return None  # not an application's run: its tables are not read
    data = load_run(Path(run_dir))
    return view_application_text(build_run_view(data, 0, with_history=False))


def section_problems(v: RunView) -> Markup:
    if not v.data.problems:
        return Markup("")
    return tag("div", [tag("strong", "Missing or unreadable data"), bullets(v.data.problems)], class_="problems")


def section_timeline(v: RunView) -> Markup:
    legend = tag("div", [
        tag("span", "acks/s (by ack time)", style="--c:#2ca02c"), tag("span", "errors/s", style="--c:#d62728"),
        tag("span", "reads/s (dashed)", style="--c:#1f77b4"), tag("span", "p99 publish latency", style="--c:#6a3d9a"),
        tag("span", "sending but no ack (strip at the bottom)", style="--c:#7f0000"),
        tag("span", "leader/ISR: full ISR", style="--c:#d9f0d3"), tag("span", "ISR shrunk", style="--c:#fdd49e"),
        tag("span", "no leader / node down", style="--c:#f4a6a6")], class_="legend")
    changes = v.timeline.changes
    change_list = Markup("")
    if changes:
        rows = [(fmt_t(c.t_s), f"p{c.partition}", c.text.split(": ", 1)[-1]) for c in changes[:200]]
        change_list = tag("details", [tag("summary", f"{plural(len(changes), 'leader/ISR change')} "
                                                     f"(from cluster snapshots, sampled every second)"),
                                      table(["time", "partition", "change"], rows, numeric=[0])])
    return join([tag("h2", "Timeline", id="timeline"),
                 tag("p", f"Shaded bands are fault windows, labelled with kind, target and resolved nodes; dashed "
                          f"lines are leader changes. Hover for exact numbers. Series from {v.timeline.source}; "
                          f"faults from faults.parquet; leader, ISR and node liveness from cluster_snapshots.parquet.",
                     class_="sub"),
                 legend, svg_timeline(v.timeline), change_list])


def section_outcomes(v: RunView) -> Markup:
    rows = outcome_rows(v.data.metrics)
    body = table(["outcome", "values", "meaning"], [(l, fmt_int(n), mng) for l, n, mng in rows], numeric=[1]) \
        if rows else none_note("Not analysed: the outcome counts come from the Spark analysis (kafkaproof analyze).")
    return join([tag("h2", "Outcomes", id="outcomes"), body])


def section_anomalies(v: RunView, examples: int) -> Markup:
    out = [tag("h2", "Anomalies", id="anomalies")]
    if v.counts is None:
        out.append(none_note("Not analysed: run the Spark analysis (kafkaproof analyze) to classify anomalies."))
        return join(out)
    summary_rows = []
    for ks in v.kinds:
        when = "–" if ks.first_s is None else f"{fmt_t(ks.first_s)} – {fmt_t(ks.last_s)}"
        during = "–" if ks.during_faults is None else f"{ks.during_faults / ks.count:.0%}"
        summary_rows.append((Markup(tag("code", ks.kind)), fmt_int(ks.count), when, during, ks.sentence))
    if summary_rows:
        out.append(table(["kind", "count", "when (sent / read)", "during a fault", "meaning"], summary_rows,
                         numeric=[1, 3]))
    zero = [k for k in ordered_kinds(v.counts) if not v.counts[k]]
    if not summary_rows:
        out.append(tag("p", "No anomaly of any kind: every value is where it should be."))
    if zero:
        out.append(tag("p", "Checked and not found: " + ", ".join(zero) + ".", class_="sub"))
    for ks in v.kinds:
        out.append(tag("h3", f"{ks.kind}: {fmt_int(ks.count)} — examples (up to {examples})"))
        causes = attribution_text(v.data.metrics, ks.kind) or (
            delivery_text(v.data.metrics) if ks.kind == "undelivered_attempts" else None)
        if causes:
            out.append(tag("p", causes, class_="sub"))
        rows = [(fmt_value_id(e.get("value_id")), fmt_int(e.get("partition")), e.get("offsets", "–"),
                 fmt_t(e.get("t_s"), 2), e.get("fault", "–"), Markup(tag("span", e.get("detail") or "", class_="detail")))
                for e in ks.examples]
        out.append(table(["value id", "partition", "offset(s)", "time", "fault active then", "detail"], rows,
                         numeric=[1, 2, 3]) if rows else none_note("no examples recorded"))
    return join(out)


def section_exercised(v: RunView) -> Markup:
    """Which faults took effect and which of the scenario's conditions held: a verdict means nothing without them."""
    results = list(((v.data.metrics or {}).get("exercised")) or [])
    out = [tag("h2", "Was the check exercised?", id="exercised")]
    if not results:
        out.append(none_note("No faults and no conditions to check." if v.data.metrics is not None
                             else "Not analysed."))
        return join(out)
    rows = [(Markup(tag("span", "held" if r.get("held") else "NOT MET", class_="held" if r.get("held") else "notmet")),
             Markup(tag("code", r.get("check", "?"))), r.get("subject", ""), r.get("evidence", ""), r.get("why", ""))
            for r in results]
    out.append(table(["", "check", "of", "evidence", "why it matters"], rows))
    if any(not r.get("held") for r in results):
        out.append(tag("p", "A condition not met makes a run that would pass an error: the faults did not do what "
                            "the scenario needs, so its pass would mean nothing. A violation found is a failure "
                            "all the same.", class_="sub"))
    return join(out)


def section_latency(v: RunView) -> Markup:
    rows = latency_rows(v.data.metrics, v.data.tables.get("sends"))
    out = [tag("h2", "Latency", id="latency")]
    if not rows:
        out.append(none_note("No latency data (no acknowledged sends)."))
        return join(out)
    hdr = ["measure", "count", "p50", "p95", "p99", "p99.9", "max"]
    out.append(table(hdr, [(r["name"], fmt_int(r.get("count")), *[fmt_ms(r.get(k)) for k in PERCENTILE_KEYS])
                           for r in rows], numeric=range(1, 7)))
    by_fault = latency_by_fault_rows(v.data.metrics, v.windows)
    if by_fault:
        out.append(tag("h3", "Publish latency by fault window (by send time)"))
        out.append(table(["sent while", "acked", "p50", "p95", "p99", "p99.9", "max"],
                         [(r["name"], fmt_int(r.get("count")), *[fmt_ms(r.get(k)) for k in PERCENTILE_KEYS])
                          for r in by_fault], numeric=range(1, 7)))
    return join(out)


def section_recovery(v: RunView) -> Markup:
    out = [tag("h2", "Faults and recovery", id="recovery")]
    rows = recovery_rows(v.data.metrics, v.windows)
    if not rows:
        out.append(none_note("No faults were injected in this run."))
        return join(out)
    hdr = ["fault", "from", "healed", "lasted", "errors", "first error after", "acks resumed after",
           "recovered after heal", "longest ack gap", "max consumer lag"]
    out.append(table(hdr, [(r["fault"], fmt_t(r["start_s"]), fmt_t(r["end_s"]) if r["end_s"] is not None else "NEVER",
                            fmt_num(r["duration_s"], 1, "s"), fmt_int(r.get("errors")),
                            fmt_ms(r.get("time_to_first_error_ms")), fmt_ms(r.get("acks_resume_ms")),
                            fmt_recovery(r.get("recovery_after_heal_ms")), fmt_ms(r.get("max_ack_gap_ms")),
                            fmt_int(r.get("max_consumer_lag"))) for r in rows], numeric=range(1, 10)))
    avail = (v.data.metrics or {}).get("availability") or {}
    if avail:
        windows = ", ".join(f"{w.get('start_s')}–{w.get('end_s')} s" for w in avail.get("unavailability_windows") or [])
        out.append(tag("p", f"Seconds with sends but no ack: {fmt_int(avail.get('seconds_unavailable'))} of "
                            f"{fmt_int(avail.get('seconds_with_attempts'))}"
                            f"{' (' + windows + ')' if windows else ''}; acked "
                            f"{fmt_num((avail.get('ok_ratio') or 0) * 100, 1)}% of attempted sends.", class_="sub"))
    stamps = (v.data.metrics or {}).get("timestamps")
    if stamps is not None:
        out.append(tag("p", timestamps_text(stamps), class_="sub"))
    return join(out)


def section_elr(v: RunView) -> Markup:
    """Leader, ISR and eligible leader replicas (KIP-966) as DescribeTopicPartitions answered them; nothing
    when the run has no such evidence (Kafka before 4.0, an older run)."""
    m = v.data.manifest or {}
    section, features = m.get("elr"), m.get("features") or {}
    if not isinstance(section, Mapping):
        return Markup("")
    def t(ns: Any) -> str:
        return "–" if ns is None else fmt_t((int(ns) - v.t0) / 1e9)
    level = (features.get("finalized") or {}).get("eligible.leader.replicas.version", 0)
    out = [tag("h2", "Leaders and eligible leader replicas", id="elr"),
           tag("p", f"ELR {'on' if level else 'off'} (eligible.leader.replicas.version={level}"
                    f"{', pinned at format' if 'eligible.leader.replicas.version' in (features.get('format') or {}) else ''}); "
                    f"{fmt_int(section.get('samples'))} samples every {section.get('interval_s')} s, "
                    f"{fmt_int(section.get('failures'))} no broker answered.", class_="sub")]
    picked = [f"{t(e['ts_ns'])}: partition {e['partition']} led by {e['leader']} (was {e['previous']}, epoch "
              f"{e['epoch']}){' from the ELR ' + ids_text(e['elr_before']) if e['from_elr'] else ''}"
              for e in elections(section)]
    gaps = [f"partition {w['partition']} leaderless {t(w['start_ns'])} – {t(w['end_ns'])}"
            for w in leaderless_windows(section)]
    if picked or gaps:
        out.append(bullets(picked + gaps))
    rows = [(t(c["ts_ns"]), c["partition"], c["leader"], c.get("leader_epoch"), ids_text(c.get("isr")),
             ids_text(c.get("elr")), ids_text(c.get("last_known_elr")), ids_text(c.get("offline")), c.get("from"))
            for c in section.get("changes") or []]
    out.append(table(["at", "partition", "leader", "epoch", "ISR", "ELR", "last known ELR", "offline", "answered by"],
                     rows, numeric=[0, 1, 2, 3]) if rows else none_note("No broker answered DescribeTopicPartitions."))
    return join(out)


def timestamps_text(stamps: Mapping[str, Any]) -> str:
    """Pure: what the clock faults did to the log's timestamps (analysis `timestamps`)."""
    n = stamps.get("regressions") or 0
    if not n:
        return "Log timestamps: none goes backwards within its partition."
    worst = (stamps.get("examples") or [{}])[0]
    return (f"Log timestamps: {plural(n, 'record')} stamped earlier than the record before it in its partition, "
            f"by up to {fmt_ms(stamps.get('max_back_ms'))} (e.g. partition {worst.get('partition')} offset "
            f"{worst.get('offset')}): a broker clock moved (LogAppendTime) or producers' clocks differ (CreateTime).")


def fmt_recovery(ms: Any) -> str:
    """Recovery after the heal; negative when acks had already resumed while the fault was active."""
    if is_missing(ms) or float(ms) >= 0:
        return fmt_ms(ms)
    return f"before the heal ({fmt_ms(-float(ms))} earlier)"


def section_errors(v: RunView) -> Markup:
    rows = error_rows(v.data.tables.get("sends"), v.t0)
    body = table(["error", "outcome", "sends", "first", "last", "the client's message (most frequent)"],
                 [(Markup(tag("code", r["error"])), r["outcome"], fmt_int(r["count"]), fmt_t(r["first_s"]),
                   fmt_t(r["last_s"]), r.get("message") or "–") for r in rows], numeric=[2, 3, 4]) if rows else \
        none_note("No send errors." if v.data.tables.get("sends") is not None else "sends.parquet is missing.")
    return join([tag("h2", "Send errors by name", id="errors"), body])


def describe_faults_plan(scn: Mapping[str, Any]) -> list[str]:
    out = []
    for f in scn.get("faults") or []:
        if not isinstance(f, Mapping):
            continue
        dur = f" for {f['duration']} s" if f.get("duration") is not None else " until the producers finish"
        params = f" {json.dumps(f['params'], sort_keys=True)}" if f.get("params") else ""
        out.append(f"at {f.get('at')} s: {f.get('kind')} {f.get('target', '')}{params}{dur}")
    return out


def as_json(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def producers_text(prod: Any) -> str:
    """One line about the producers (the resolved scenario has a mapping; anything else is shown as JSON)."""
    if not isinstance(prod, Mapping):
        return as_json(prod)
    amount = f"{prod['messages']:,} values each" if prod.get("messages") else f"{prod.get('duration_s', '?')} s"
    txn = f", transactions {as_json(prod['transactions'])}" if prod.get("transactions") else ""
    return (f"{prod.get('count', '?')} × {prod.get('rate', '?')}/s, {amount}, config "
            f"{as_json(prod.get('config') or {})}{txn}")


def consumers_text(cons: Any) -> str:
    if not isinstance(cons, Mapping):
        return as_json(cons)
    return (f"{cons.get('count', '?')} × {cons.get('mode', '?')}, commit {cons.get('commit', '?')}, "
            f"{cons.get('isolation_level', '?')}, processing {cons.get('processing_ms', 0)} ms"
            + (f", config {as_json(cons['config'])}" if cons.get("config") else ""))


def section_scenario(v: RunView) -> Markup:
    scn = scenario_of(v.data.manifest)
    out = [tag("h2", "The scenario as run", id="scenario")]
    if not scn:
        out.append(none_note("The manifest holds no scenario."))
        return join(out)
    topic, cluster = mapping(scn.get("topic")), mapping(scn.get("cluster"))
    outcome, detect, why = expectation_of(v.data.manifest)
    plan = describe_faults_plan(scn)
    pairs = [("guarantee", guarantee_of(v.data.manifest) or "–"),
             ("expect", "pass" if outcome == "pass" else f"detect {', '.join(detect)}: {why}"),
             ("cluster", f"{cluster.get('brokers', '?')} brokers, {cluster.get('controllers', 0)} dedicated "
                         f"controllers, Kafka {cluster.get('kafka_version', '?')}, config "
                         f"{as_json(cluster.get('config') or {})}"
                         + (f", formatted with features {as_json(cluster['features'])}" if cluster.get("features") else "")),
             ("topic", f"{topic.get('name', '?')}: {topic.get('partitions', '?')} partitions, RF "
                       f"{topic.get('replication_factor', '?')}, config {as_json(topic.get('config') or {})}"),
             ("producers", producers_text(scn.get("producers"))),
             ("consumers", consumers_text(scn.get("consumers"))),
             ("faults", bullets(plan) if plan else "none"),
             ("tags", ", ".join(map(str, scn.get("tags") or [])) or "–"),
             ("file", (v.data.manifest or {}).get("scenario_path") or "–"),
             ("hash", (v.data.manifest or {}).get("scenario_hash") or "–")]
    out.append(tag("div", kv(pairs), class_="card"))
    out.append(tag("details", [tag("summary", "resolved scenario (JSON)"),
                               tag("pre", json.dumps(scn, indent=2, sort_keys=True, default=str))]))
    return join(out)


def section_explanation(v: RunView) -> Markup:
    """What the scenario does and why, right under the verdict."""
    scn = scenario_of(v.data.manifest)
    parts = []
    if scn.get("description"):
        parts.append(tag("strong", scn["description"]))
    if scn.get("explanation"):
        parts.append(tag("div", str(scn["explanation"]).strip()))
    return tag("div", parts, class_="explanation") if parts else Markup("")


def section_environment(v: RunView) -> Markup:
    m = v.data.manifest or {}
    versions = m.get("versions") or {}
    cluster = m.get("cluster") or {}
    out = [tag("h2", "Versions and cluster", id="cluster")]
    left = kv([(k, versions[k]) for k in sorted(versions)] +
              [("clients", "; ".join(client_summary(read_client_versions(m))) or "–")] +
              [("group protocol", text) for text in [protocol_text(m.get("consumer_protocols"),
                                                                   m.get("consumer_group"))] if text] +
              [("host", f"{(m.get('host') or {}).get('hostname', '?')}, {(m.get('host') or {}).get('cpus', '?')} CPUs"),
               ("bootstrap", m.get("bootstrap") or cluster.get("bootstrap_servers") or "–"),
               *([("client connection", connection_text(m["client_connection"]))]
                 if m.get("client_connection") else []),
               ("cluster id", cluster.get("cluster_id") or "–"),
               *([("cluster", reuse_text(m["cluster_reuse"]))] if m.get("cluster_reuse") else []),
               *([("random faults", random_schedule_text(m["random_schedule"], m.get("run_id") or ""))]
                 if m.get("random_schedule") else []),
               *([("workload ended early", f"at t={m['stopped_early'].get('at_s')} s: {m['stopped_early'].get('reason')}")]
                 if m.get("stopped_early") else []),
               *([("salvaged", "assembled from its streams after it died before its final drain "
                               "(`kafkaproof run --salvage`)")] if m.get("salvaged") else []),
               ("network", cluster.get("network") or "–")])
    nodes = [n for n in cluster.get("nodes") or [] if isinstance(n, Mapping)]
    node_table = table(["node", "roles", "address", "namespace", "state at the end"],
                       [(n.get("id"), n.get("roles"), n.get("address"), n.get("namespace"), n.get("state"))
                        for n in nodes], numeric=[0]) if nodes else none_note("No cluster status in the manifest.")
    timing_rows = [(p["name"], fmt_t(p["start_s"]), fmt_num(p.get("seconds"), 2, "s")) for p in v.timeline.phases]
    timings = table(["phase", "start", "took"], timing_rows, numeric=[1, 2]) if timing_rows else Markup("")
    out.append(tag("div", [tag("div", [left, timings], class_="card"),
                           tag("div", [node_table, topic_table(m)], class_="card")], class_="grid2"))
    return join(out)


def random_schedule_text(schedule: Mapping[str, Any], run_id: str) -> str:
    """Pure: how a random schedule was drawn and how to run it again."""
    kinds = sorted({f["kind"] for f in schedule.get("faults") or []})
    return (f"{len(schedule.get('faults') or [])} drawn with seed {schedule.get('seed')} ({', '.join(kinds) or 'none'}); "
            f"the same again: kafkaproof run --replay <runs>/{run_id}")


def reuse_text(reuse: Mapping[str, Any]) -> str:
    """Pure: whether the run had a fresh cluster, or one earlier scenarios of the batch used, and what was
    checked before it was reused."""
    before = list(reuse.get("runs_before") or [])
    if not reuse.get("reused"):
        reclaimed = [r for r in reuse.get("reclaimed") or [] if isinstance(r, Mapping)]
        return "fresh, started for this run" + "".join(
            f"; first reclaimed the leftover pipeline cluster {r.get('cluster')} of DAG run {r.get('batch') or '?'} "
            f"({r.get('why')})" for r in reclaimed)
    left = reuse.get("leftovers") or {}
    return (f"reused after {', '.join(before)} (same batch, same cluster settings); checked before this run: every node "
            f"{'and proxy ' if left.get('proxy_states') else ''}running, no fault, nftables table, bandwidth "
            f"limit or proxy rule left, all {left.get('partitions', '?')} partitions in sync, no run's worker "
            f"alive, no consumer group with members, this run's topic and group new")


def topic_table(m: Mapping[str, Any]) -> Markup:
    desc = m.get("topic_description") or {}
    parts = desc.get("partitions") if isinstance(desc, Mapping) else None
    if not isinstance(parts, Mapping) or not parts:
        return Markup("")
    rows = [(p, i.get("leader"), ", ".join(map(str, i.get("replicas") or [])), ", ".join(map(str, i.get("isr") or [])))
            for p, i in sorted(parts.items(), key=lambda kvp: int(kvp[0])) if isinstance(i, Mapping)]
    return join([tag("h3", f"Topic {desc.get('topic', '')} when created"),
                 table(["partition", "leader", "replicas", "ISR"], rows, numeric=[0, 1])])


def section_links(v: RunView) -> Markup:
    rd, here = v.data.run_dir, v.report_dir
    counts = (v.data.manifest or {}).get("counts") or {}
    items = []
    for name in (MANIFEST, *[f"{t}.parquet" for t in TABLES]):
        p = rd / name
        if name.split(".")[0] in (*PIPELINE_TABLES, *SHARE_TABLES) and not p.exists():
            continue  # not a pipeline (share-group) run: nothing missing
        extra = f" ({fmt_int(counts.get(name.split('.')[0]))} rows)" if counts.get(name.split(".")[0]) is not None else ""
        items.append(link(rel_href(p, here), name) + esc(extra) if p.exists() else esc(f"{name} (missing)"))
    for name in (f"{t}.parquet" for t in SIDE_TABLES):  # beside the analysis' inputs, when the run has them
        if (rd / name).exists():
            items.append(link(rel_href(rd / name, here), name))
    groups = [("Ledger", items)]
    analysis = [link(rel_href(p, here), f"analysis/{p.name}") for p in sorted((rd / "analysis").glob("*"))] \
        if (rd / "analysis").is_dir() else [esc("not analysed")]
    groups.append(("Analysis", analysis))
    val = []
    if (rd / "validation" / "result.json").exists():
        val.append(link(rel_href(rd / "validation" / "result.json", here), "validation/result.json"))
    if v.data.data_docs:
        val.append(link(rel_href(v.data.data_docs, here), "Great Expectations Data Docs"))
    groups.append(("Validation", val or [esc("not validated")]))
    logs = [link(rel_href(p, here), f"logs/{p.name}") for p in sorted((rd / "logs").glob("*.log"))]
    work = [link(rel_href(p, here), f"work/{p.name}") for p in sorted((rd / "work").glob("*.log"))]
    groups.append(("Broker logs", logs or [esc("none copied")]))
    groups.append(("Client logs", work or [esc("none")]))
    services = [link(rel_href(p, here), f"services/{p.name}") for p in sorted((rd / "services").glob("*.log"))]
    if services:  # the application's services: each instance's stdout and stderr
        groups.append(("Application logs", services))
    cards = [tag("div", [tag("h3", title), bullets(entries)], class_="card") for title, entries in groups]
    return join([tag("h2", "Files", id="files"), tag("div", cards, class_="grid2")])


def section_trend(v: RunView) -> Markup:
    out = [tag("h2", "Trend: this scenario's recent runs", id="trend")]
    if v.history_error:
        out.append(none_note(f"No trend: {v.history_error}."))
    elif not v.history:
        out.append(none_note("The results history holds no run of this scenario yet (the history store is empty "
                             "for it); the trend starts with the next recorded run."))
    elif len(v.trend) < 2:
        out.append(none_note("Only this run of the scenario is in the results history so far."))
    if len(v.trend) < 2 or v.history_error:
        return join(out)
    out.append(tag("div", [svg_trend(v.trend, "recovery_s", "recovery after heal (max)", "s"),
                           svg_trend(v.trend, "p99_ms", "p99 publish latency", "ms"),
                           svg_trend(v.trend, "anomalies", "anomalies (all kinds)", "count")], class_="trends"))
    rows = []
    for p in reversed(v.trend):
        href = rel_href(Path(p.report), v.report_dir) if p.report and Path(p.report).exists() and not p.current else None
        rows.append((p.when, link(href, p.run_id) if href else (p.run_id + (" (this run)" if p.current else "")),
                     p.kafka_version or "–", badge(p.verdict if p.verdict in VERDICT_COLORS else None),
                     fmt_num(p.recovery_s, 1, "s"), fmt_ms(p.p99_ms), fmt_int(p.anomalies), p.anomaly_kinds or "–"))
    out.append(table(["finished", "run", "Kafka", "verdict", "recovery", "p99", "anomalies", "kinds"], rows,
                     numeric=[4, 5, 6]))
    return join(out)


def render_run(v: RunView, examples: int) -> str:
    """The run report page."""
    nav = tag("div", join([link(f"#{a}", t) for a, t in (
        ("timeline", "timeline"), ("anomalies", "anomalies"), ("exercised", "exercised"), ("outcomes", "outcomes"),
        ("errors", "errors"),
        ("recovery", "recovery"), ("elr", "ELR"), ("latency", "latency"), ("scenario", "scenario"), ("cluster", "cluster"),
        ("files", "files"), ("trend", "trend"))], " · "), class_="sub")
    body = [section_header(v), nav, section_verdict(v), section_explanation(v), section_problems(v),
            section_timeline(v), section_anomalies(v, examples), section_exercised(v),
            tag("div", [tag("div", section_outcomes(v)), tag("div", section_errors(v))], class_="grid2"),
            section_recovery(v), section_elr(v), section_latency(v), section_scenario(v), section_environment(v),
            section_trend(v), section_links(v)]
    return page(f"{v.verdict.status.upper()} {v.name} — kafkaproof", body)


def write_run_report(run_dir: Path, examples: int = DEFAULT_EXAMPLES, history_url: str | None = None) -> Path:
    """Write `<run_dir>/report/index.html` and return its path.

    Renders whatever the run directory holds: a run that ended in error, or that was never
    analysed or validated, still gets a page saying what is missing. `history_url` overrides
    the results history store (default: `kafkaproof.history.history_url()`).
    """
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    view = build_run_view(data, examples, history_url)
    return write_html(run_dir / REPORT_DIR / "index.html", render_run(view, examples))






