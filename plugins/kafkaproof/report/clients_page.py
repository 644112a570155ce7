"""The client matrix page: each scenario under each client (librdkafka, java) on the same faults, side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .batch_page import batch_dir
from .kit import Markup, bullets, fmt_num, join, now_utc, page, plural, table, tag, write_html
from .upgrade_page import upgrade_cell


def client_columns(summaries: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[tuple[str, dict[str, Mapping]]]]:
    """Pure: the clients (column order: librdkafka first) and, per scenario, its summary under each client."""
    by: dict[str, dict[str, Mapping]] = {}
    for s in summaries:
        by.setdefault(s["scenario"], {})[s.get("label") or "default"] = s
    clients = sorted({c for runs in by.values() for c in runs}, key=lambda c: (c != "librdkafka", c))
    return clients, sorted(by.items())


def outcomes_line(s: Mapping | None) -> Markup:
    outcomes = ((s or {}).get("metrics") or {}).get("outcomes") or {}
    if not outcomes:
        return Markup("")
    return tag("div", " · ".join(f"{k} {fmt_num(outcomes.get(k), 0)}" for k in ("acked", "failed", "indefinite")),
               class_="detail")


def render_clients(summaries: Sequence[Mapping[str, Any]], differences: Sequence[str], batch_id: str,
                   here: Path) -> str:
    """The page: what differs between the clients first, then scenario × client with verdict, outcomes,
    recovery, p99 and anomalies, each linking its run report."""
    clients, rows_by = client_columns(summaries)
    failed = any(s.get("verdict") != "pass" for s in summaries)
    headline = (f"{len(differences)} difference{'s' if len(differences) != 1 else ''} between "
                f"{', '.join(clients)}" if differences else f"No difference between {', '.join(clients)}")
    body = [tag("h1", f"Client matrix {batch_id}"), tag("div", f"generated {now_utc()}", class_="sub"),
            tag("section", [tag("h2", headline),
                            bullets(differences) if differences else
                            tag("div", f"{plural(len(rows_by), 'scenario')}: same verdicts, send outcomes and "
                                       f"anomaly counts under every client.")],
                class_=f"verdict {'fail' if failed else 'pass'}")]
    rows = [(name, *[join([upgrade_cell(runs.get(c), here), outcomes_line(runs.get(c))]) for c in clients])
            for name, runs in rows_by]
    body.append(tag("h2", "Scenario × client (same cluster settings, same faults)"))
    body.append(table(["scenario", *clients], rows))
    return page(f"Client matrix {batch_id} — kafkaproof", body)


def write_client_report(summaries: list[dict], differences: list[str], batch_id: str, out: Path) -> Path:
    """Write `<out>/batches/<safe batch id>/index.html`: the client matrix of a batch."""
    summaries = [s for s in summaries if s]
    here = batch_dir(batch_id, out)
    return write_html(here / "index.html", render_clients(summaries, differences, batch_id, here))
