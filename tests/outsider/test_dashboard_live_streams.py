"""The dashboard's live updates (`/live`, server-sent events) under reconnects and many pages.

Found by the session-33 outsider:
- A page's EventSource reconnects by itself (the dashboard restarted by `up`, a dropped
  connection) to the same URL, `/live?after=<seq when the page loaded>`, and the stream sent no
  event ids, so the reconnected stream sent every line since the page loaded again: the page showed
  them twice. Now each update carries its last sequence as its id, and a reconnect's
  `Last-Event-ID` header is where the stream goes on from.
- Nothing bounded the open streams, and each rendered every line again for itself: 50 open pages
  cost the dashboard 10 % of a core at 200 events a second (load 13-17), against 2 % now that a
  line is rendered once for all; past MAX_LIVE streams a new one is answered 503.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from schemas import events as ev
from schemas.types import ClaimSpec
from services.dashboard import app
from services.dashboard.app import Dashboard, routes
from tests.ops_ux.test_dashboard_render import _NoLog, _NoNats
from tests.waiting import until


def submitted(dashboard: Dashboard, seq: int) -> None:
    claim = ClaimSpec(claim_id=f"live-{seq}", namespace="team-a")
    dashboard.feed(seq, f"gpu.evt.claim.live-{seq}", ev.ClaimSubmitted(claim=claim, at=time.time()))


@pytest.fixture
async def dashboard():
    board = Dashboard(_NoNats(), _NoLog(), {})
    server = await routes(board).serve("127.0.0.1", 0)
    board.port = server.sockets[0].getsockname()[1]
    yield board
    server.close()


async def open_live(port: int, after: int = 0, last_event_id: str | None = None):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
    writer.write(f"GET /live?after={after} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    return head.split(b" ", 2)[1].decode(), reader, writer


async def next_update(reader) -> tuple[str | None, list[str]]:
    """(the update's id, its lines' HTML) of the next `lines` event (keep-alives skipped)."""
    while True:
        block = (await asyncio.wait_for(reader.readuntil(b"\n\n"), 30)).decode()
        fields = dict(line.split(": ", 1) for line in block.strip().split("\n") if ": " in line)
        if fields.get("event") == "lines":
            return fields.get("id"), json.loads(fields["data"])


async def test_a_reconnected_page_gets_only_what_it_has_not_shown(dashboard):
    for seq in (1, 2, 3):
        submitted(dashboard, seq)
    status, reader, writer = await open_live(dashboard.port, after=0)
    assert status == "200"
    update_id, lines = await next_update(reader)
    assert [f"live-{s}" in html for s, html in zip((1, 2, 3), lines)] == [True] * 3
    assert update_id == "3", "each update names its last sequence, for the browser's Last-Event-ID"
    writer.close()

    # the browser reconnects to the same URL (after=0), saying what it has seen
    submitted(dashboard, 4)
    status, reader, writer = await open_live(dashboard.port, after=0, last_event_id=update_id)
    assert status == "200"
    update_id, lines = await next_update(reader)
    assert len(lines) == 1 and "live-4" in lines[0] and update_id == "4", lines
    writer.close()


async def test_past_max_live_streams_a_new_one_is_refused_until_one_closes(dashboard, monkeypatch):
    monkeypatch.setattr(app, "MAX_LIVE", 3, raising=False)
    submitted(dashboard, 1)
    opened = [await open_live(dashboard.port) for _ in range(3)]
    assert [status for status, _, _ in opened] == ["200"] * 3
    status, reader, writer = await open_live(dashboard.port)
    assert status == "503" and b"too many live updates open" in await reader.read(), status
    writer.close()

    # a page closed: its stream ends at the next write and frees its place
    opened[0][2].close()
    seq = [1]

    def more_lines() -> None:
        seq[0] += 1
        submitted(dashboard, seq[0])

    assert await until(lambda: dashboard.live_streams < 3, meanwhile=more_lines, poll_s=0.3)
    status, _, writer = await open_live(dashboard.port)
    assert status == "200"
    writer.close()
    for _, _, other in opened[1:]:
        other.close()
