"""The HTML kit of the reports: escaping, formatting, building blocks, the stylesheet, writing pages.

Pages are self-contained: inline CSS and inline SVG, no scripts, no external files, so they
open from disk and survive being attached to a ticket. Everything taken from data is
HTML-escaped (`esc`); functions that build markup return `Markup`.
"""
from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ..paths import write_text_atomic
from ..spec.ledger import split_value_id

VERDICT_COLORS = {"pass": "#2ca02c", "fail": "#d62728", "error": "#7f7f7f"}


NS_PER_S = 1_000_000_000


NS_PER_MS = 1_000_000


VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}


class Markup(str):
    """A string that already is HTML/SVG: `esc` passes it through unchanged.

    Concatenation escapes the other operand, so `Markup + data` stays safe.
    """

    def __add__(self, other: Any) -> Markup:
        return Markup(str.__add__(self, esc(other)))

    def __radd__(self, other: Any) -> Markup:
        return Markup(str.__add__(esc(other), self))


def esc(value: Any) -> Markup:
    """HTML-escape anything that is not already `Markup` (None renders empty)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[Any], sep: str = "") -> Markup:
    """Escape and concatenate."""
    return Markup(sep.join(esc(p) for p in parts))


def tag(name: str, content: Any = "", **attrs: Any) -> Markup:
    """`<name attrs>content</name>`; `class_` → class, `text_anchor` → text-anchor; None attributes dropped."""
    body = join(content) if isinstance(content, (list, tuple)) else esc(content)
    return Markup(f"<{name}{attributes(attrs)}>{body}</{name}>")


def void(name: str, **attrs: Any) -> Markup:
    """A self-closing SVG element."""
    return Markup(f"<{name}{attributes(attrs)}/>")


def attributes(attrs: Mapping[str, Any]) -> str:
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)


def is_missing(v: Any) -> bool:
    """None, NaN, pandas NA."""
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def fmt_int(v: Any) -> str:
    """1,490 style; '–' when missing."""
    return "–" if is_missing(v) else f"{int(v):,}"


def fmt_num(v: Any, digits: int = 1, unit: str = "") -> str:
    """A number with `digits` decimals (fewer for big numbers) and an optional unit."""
    if is_missing(v):
        return "–"
    v = float(v)
    if abs(v) >= 1000:
        text = f"{v:,.0f}"
    else:
        text = f"{v:,.{digits}f}"
    return f"{text} {unit}".rstrip() if unit else text


def fmt_ms(v: Any) -> str:
    """Milliseconds, switching to seconds above 10 s."""
    if is_missing(v):
        return "–"
    v = float(v)
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f} s"
    return f"{v:,.1f} ms" if abs(v) >= 10 else f"{v:,.2f} ms"


def fmt_t(v: Any, digits: int = 1) -> str:
    """A time relative to the run start (more digits below a second)."""
    if is_missing(v):
        return "–"
    return f"{float(v):,.{max(digits, 2) if abs(float(v)) < 1 else digits}f} s"


def fmt_value_id(value_id: Any) -> str:
    """`value_id (p<producer>#<seq>)`."""
    if is_missing(value_id):
        return "–"
    vid = int(value_id)
    if vid < 0:
        return f"{vid} (foreign)"
    producer, seq = split_value_id(vid)
    return f"{vid} (p{producer} #{seq})"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def wall_time(ns: Any) -> str:
    """ISO-ish UTC wall time of a wall-clock ns value."""
    if is_missing(ns):
        return "–"
    return datetime.fromtimestamp(int(ns) / NS_PER_S, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#222;
 margin:0;background:#f6f7f9}
main{max-width:1240px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 6px}
a{color:#1a5fb4}
.sub{color:#666;font-size:13px}
.verdict{border-radius:8px;padding:14px 18px;margin:14px 0;color:#fff}
.verdict h2{border:0;margin:0 0 6px;font-size:20px;padding:0;color:#fff}
.verdict.pass{background:#2b8a3e}.verdict.fail{background:#c92a2a}.verdict.error{background:#5c5f66}
.verdict ul{margin:6px 0 0;padding-left:20px}
.verdict li{margin:3px 0}
.verdict li.bad{font-weight:600}
.held{color:#2ca02c}.notmet{color:#d62728;font-weight:600}
.verdict li.good::marker{content:"✔ "}.verdict>div{opacity:.95}.verdict li.bad::marker{content:"✘ "}
.verdict li.warn::marker{content:"! "}.verdict li.info::marker{content:"• "}
.card{background:#fff;border:1px solid #e1e3e8;border-radius:8px;padding:12px 16px;margin:10px 0}
.explanation{background:#fffbe6;border-left:4px solid #f0b400;padding:10px 14px;margin:10px 0}
.explanation div{white-space:pre-line;margin-top:4px}
.problems{background:#fff4e5;border-left:4px solid #e8590c;padding:8px 14px;margin:10px 0}
.problems ul{margin:4px 0;padding-left:18px}
table{border-collapse:collapse;width:100%;background:#fff;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #e1e3e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
tbody tr:nth-child(even){background:#fafbfc}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;border-radius:4px;padding:1px 8px;font-weight:700;color:#fff;font-size:12px;
 text-transform:uppercase;letter-spacing:.03em}
.badge.pass{background:#2b8a3e}.badge.fail{background:#c92a2a}.badge.error{background:#5c5f66}
.badge.unknown{background:#adb5bd}
.chg{font-weight:700}.chg.worse{color:#c92a2a}.chg.better{color:#2b8a3e}.chg.same{color:#666;font-weight:400}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:#444;margin:4px 0}
.legend span::before{content:"";display:inline-block;width:16px;height:10px;margin-right:5px;vertical-align:middle;
 background:var(--c);border-radius:2px}
.trends{display:flex;flex-wrap:wrap;gap:12px}
.trends svg{background:#fff;border:1px solid #e1e3e8;border-radius:6px}
svg.timeline{background:#fff;border:1px solid #e1e3e8;border-radius:6px;display:block}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px}
.kv dt{color:#666}.kv dd{margin:0}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:14px}
pre{background:#f0f2f5;padding:8px;overflow:auto;font-size:12px;max-height:420px}
code{font-size:12.5px}
details summary{cursor:pointer;color:#1a5fb4}
.muted{color:#888}
.detail{color:#555;font-size:12px}
footer{margin-top:32px;color:#888;font-size:12px}
td ul{margin:0;padding-left:16px}
@media print{body{background:#fff}.card,table{break-inside:avoid}}
"""


def page(title: str, body: Sequence[Markup]) -> str:
    """A complete self-contained HTML document."""
    head = Markup("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                  f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>")
    tail = Markup(f"<footer>kafkaproof report · generated {esc(now_utc())}</footer></main></body></html>\n")
    return str(join([head, *body, tail]))


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = (),
          cls: str | None = None) -> Markup:
    """A table; `numeric` column indexes are right-aligned. Cells are escaped unless Markup."""
    num = set(numeric)
    head = join(tag("th", h, class_="num" if i in num else None) for i, h in enumerate(headers))
    body = join(tag("tr", [tag("td", c, class_="num" if i in num else None) for i, c in enumerate(r)]) for r in rows)
    return tag("table", [tag("thead", tag("tr", head)), tag("tbody", body)], class_=cls)


def kv(pairs: Iterable[tuple[str, Any]]) -> Markup:
    """A definition list of label → value (values escaped unless Markup)."""
    return tag("dl", [Markup(tag("dt", k) + tag("dd", v)) for k, v in pairs], class_="kv")


def badge(verdict: str | None) -> Markup:
    v = verdict or "unknown"
    return tag("span", v, class_=f"badge {v if v in VERDICT_COLORS else 'unknown'}")


def link(href: str | None, text: Any) -> Markup:
    return tag("a", text, href=href) if href else esc(text)


def rel_href(target: Path, from_dir: Path) -> str:
    """A relative URL from `from_dir` to `target` (both resolved), with / separators."""
    rel = os.path.relpath(Path(target).resolve(), Path(from_dir).resolve())
    return "/".join(rel.split(os.sep))


def bullets(items: Iterable[Any]) -> Markup:
    return tag("ul", [tag("li", i) for i in items])


def none_note(text: str) -> Markup:
    return tag("p", text, class_="muted")


def write_html(path: Path, text: str) -> Path:
    """Atomically write a page."""
    return write_text_atomic(path, text)
