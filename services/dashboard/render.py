"""HTML of the dashboard, rendered on the server: a page is complete as it arrives (a screenshot,
a text browser or `curl` see everything); the script in static/live.js only refreshes it."""

from __future__ import annotations

import re
from datetime import datetime
from html import escape as _html_escape
from urllib.parse import quote

from services.dashboard.feed import Line
from services.dashboard.views import Card, NodeBox, QuotaRow, Waiting


# characters that reorder or hide text (bidi overrides and isolates, zero-width, BOM, separators):
# a release reason holding U+202E is drawn backwards by the browser (session 32); shown as \uNNNN
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def escape(text: str) -> str:
    """HTML-escaped, with the characters that reorder or hide text shown as `\\uNNNN`."""
    return _html_escape(_INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def claim_href(claim_id: str, prefix: str = "/claim/") -> str:
    """A link to a claim's page, safe in an attribute whatever the id holds."""
    return escape(prefix + quote(claim_id, safe=""))


def when(epoch: float) -> str:
    """An <time> the script re-renders in the browser's zone; the server's local ISO until then."""
    if not epoch:
        return ""
    local = datetime.fromtimestamp(epoch).astimezone()
    return f'<time datetime="{local.isoformat()}">{local.isoformat(timespec="seconds")}</time>'


def page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="/static/style.css"></head>'
            f'<body><header><a href="/" class="brand">gpuledger</a> <span>{escape(title)}</span>'
            '<span id="live" class="live">live</span></header>'
            f'<main>{body}</main><script src="/static/live.js"></script></body></html>')


def card(c: Card) -> str:
    holders = ", ".join(f"{claim} ({milli}m)" for claim, milli in c.holders)
    tip = f"GPU {c.label} {c.model} {c.pool or 'no pool'}: {c.state}" + (f" — {holders}" if holders else "")
    fill = c.colours[0] if len(c.colours) == 1 else _stripes(c.colours)
    held = "".join(f'<a class="holder" href="{claim_href(claim)}">{escape(claim[:8])}</a>'
                   for claim, _ in c.holders)
    return (f'<div class="card {c.state}" style="background:{fill}" title="{escape(tip)}" '
            f'data-uuid="{escape(c.uuid)}" data-state="{c.state}">'
            f'<span class="idx">{escape(c.label)}</span>{held}</div>')


def _stripes(colours: list[str]) -> str:
    step = 100 / len(colours)
    stops = ", ".join(f"{col} {i * step:.0f}% {(i + 1) * step:.0f}%" for i, col in enumerate(colours))
    return f"linear-gradient(135deg, {stops})"


def node_box(node: NodeBox) -> str:
    islands = "".join(f'<div class="island"><div class="island-name">{escape(i.name)}</div>'
                      f'<div class="cards">{"".join(card(c) for c in i.cards)}</div></div>'
                      for i in node.islands)
    return (f'<section class="node {escape(node.condition.lower())}"><h3>{escape(node.name)} '
            f'<small>{escape(node.models)} · {escape(node.condition)}</small></h3>{islands}</section>')


def fleet(nodes: list[NodeBox], totals: dict[str, int], hidden: int) -> str:
    summary = " · ".join(f'<span class="count {k}">{v} {k}</span>' for k, v in totals.items())
    more = f'<p class="note">and {hidden} more nodes not drawn</p>' if hidden > 0 else ""
    legend = ('<p class="legend"><span class="swatch free"></span>free <span class="swatch unhealthy">'
              '</span>unhealthy; a held card has the colour of its claim (stripes: shared)</p>')
    return (f'<h2>Fleet <small>{summary}</small></h2>{legend}'
            f'<div class="fleet">{"".join(node_box(n) for n in nodes)}</div>{more}')


def queue(rows: list[Waiting]) -> str:
    if not rows:
        return '<h2>Queue</h2><p class="note">no claim is waiting</p>'
    body = "".join(
        f'<tr><td><a href="{claim_href(w.claim_id)}">{escape(w.claim_id)}</a></td><td>{escape(w.namespace)}</td>'
        f'<td>{escape(w.shape)}</td><td>{w.priority}</td><td>{when(w.submitted_at)}</td>'
        f'<td><code>{escape(w.reason_code)}</code> {escape(w.reasons[0] if w.reasons else "")}</td></tr>'
        for w in rows)
    return ('<h2>Queue <small>in the order the allocator tries them</small></h2><table class="queue">'
            '<tr><th>claim</th><th>namespace</th><th>shape</th><th>priority</th><th>waiting since</th>'
            f'<th>why it waits</th></tr>{body}</table>')


def quotas(rows: list[QuotaRow]) -> str:
    if not rows:
        return '<h2>Quotas</h2><p class="note">no quota and no use yet</p>'
    body = "".join(f'<tr><td>{escape(q.namespace)}</td>'
                   + "".join(f"<td>{_use(q, r)}</td>" for r in ("tflops", "vram_mib", "gpus", "workers"))
                   + "</tr>" for q in rows)
    return ('<h2>Quotas</h2><table class="quotas"><tr><th>namespace</th><th>TFLOPS</th><th>VRAM MiB</th>'
            f'<th>GPUs</th><th>workers</th></tr>{body}</table>')


def _use(row: QuotaRow, resource: str) -> str:
    used, limit = row.used.get(resource, 0.0), row.limits.get(resource)
    if limit is None:
        return f"{used:g}"
    percent = min(used / limit * 100, 100) if limit else 100
    return (f'{used:g} / {limit:g}<div class="bar"><div style="width:{percent:.0f}%"></div></div>')


def events(lines: list[Line]) -> str:
    items = "".join(event_item(line) for line in reversed(lines))
    return f'<h2>Event log <small>live</small></h2><ol id="events" class="events">{items}</ol>'


def event_item(line: Line) -> str:
    text = escape(line.text)
    if line.claim_id:
        text = text.replace(escape(line.claim_id), f'<a href="{claim_href(line.claim_id)}">'
                                                   f'{escape(line.claim_id)}</a>', 1)
    return (f'<li data-seq="{line.seq}"><span class="seq">{line.seq}</span> {when(line.at)} '
            f'<b>{escape(line.kind)}</b> {text}</li>')
