"""A claim's page: what the claim service's `explain` says (status, devices with their NVLink
island, the allocator's score, reasons) and its timeline, in the claim's own colour."""

from __future__ import annotations

from typing import Any

from services.dashboard.render import escape, when
from services.dashboard.views import colour_of


def claim_page(data: dict[str, Any]) -> str:
    claim_id = data["claim_id"]
    head = (f'<h2><span class="swatch" style="background:{colour_of(claim_id)}"></span>'
            f'<span id="claim-id">{escape(claim_id)}</span> <small class="status {escape(data["status"])}">'
            f'{escape(data["status"])}</small></h2>')
    facts = _facts(data)
    return head + facts + _devices(data) + _list("Why here", data.get("placement", [])) + _reasons(data) \
        + _timeline(data.get("timeline", []))


def _facts(data: dict[str, Any]) -> str:
    rows = [("namespace", data.get("namespace", "")), ("shape", data.get("shape", "")),
            ("priority", str(data.get("priority", ""))), ("node", data.get("node", "")),
            ("ended", data.get("end_reason", ""))]
    cells = "".join(f"<tr><th>{k}</th><td>{escape(str(v))}</td></tr>" for k, v in rows if v)
    submitted = f"<tr><th>submitted</th><td>{when(data['submitted_at'])}</td></tr>" if data.get(
        "submitted_at") else ""
    return f'<table class="facts">{cells}{submitted}</table>'


def _devices(data: dict[str, Any]) -> str:
    devices = data.get("devices", [])
    if not devices:
        return ""
    rows = "".join(f"<tr><td>{d['index']}</td><td><code>{escape(d['uuid'])}</code></td>"
                   f"<td>{escape(d.get('island', ''))}</td><td>{d.get('milli', 1000)}m</td></tr>" for d in devices)
    return ('<h3>Devices</h3><table class="devices"><tr><th>GPU</th><th>UUID</th><th>NVLink island</th>'
            f'<th>share</th></tr>{rows}</table>')


def _list(title: str, lines: list[str]) -> str:
    if not lines:
        return ""
    return f"<h3>{escape(title)}</h3><ul>{''.join(f'<li>{escape(line)}</li>' for line in lines)}</ul>"


def _reasons(data: dict[str, Any]) -> str:
    reasons = data.get("reasons", [])
    if not reasons:
        return ""
    items = "".join(f"<li><code>{escape(r.get('code', ''))}</code> {escape(r.get('message', ''))}</li>"
                    for r in reasons)
    return f'<h3>Reasons <small>ranked</small></h3><ol class="reasons">{items}</ol>'


def _timeline(steps: list[dict[str, Any]]) -> str:
    if not steps:
        return ""
    rows = "".join(f"<tr><td>{when(s['at'])}</td><td>{escape(s['event'])}</td></tr>" for s in steps)
    return f'<h3>History</h3><table class="timeline">{rows}</table>'


def not_found(given: str, message: str) -> str:
    return f'<h2>No claim {escape(given)}</h2><p class="note">{escape(message)}</p>'
