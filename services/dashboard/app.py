"""The dashboard process: a web view of the fleet, the queue, quotas and the live event log, and
the one Prometheus scrape endpoint of the whole stack (`gpuledger up` starts it).

It folds the log itself (`ledger.follower.Follower`, as every service does), so drawing the
fleet asks nothing of the services; a claim's page asks the claim service (`resolve`, `explain`),
the one place that explains claims. Pages are rendered on the server and refreshed by a small
script on server-sent events (`/live`).
"""

from __future__ import annotations

import asyncio
import json
from functools import lru_cache
from pathlib import Path

import msgspec

from schemas import subjects
from shared.httpserve import Request, Response, Router, Stream, fetch
from shared.metrics import Metrics
from shared.paced import SLOW_READER_LINGER_S

from ledger.follower import Follower
from services.dashboard import render, render_claim, views
from services.dashboard.feed import KEEP, Feed
from services.dashboard.login import Login
from services.dashboard.merge import merge_expositions

STATIC = Path(__file__).parent / "static"
# Open /live streams at once (a page open in a browser tab is one). Each costs the dashboard a
# coroutine, a socket and its share of every update; past this a new one is answered 503 rather
# than slowing every page (session 33: nothing bounded them, and the dashboard is published for
# anyone who can reach its port).
MAX_LIVE = 64
KEEPALIVE_S = 15.0
# each line's <li> rendered once for every stream (it was rendered again for each open page)
_item = lru_cache(maxsize=4 * KEEP)(render.event_item)


class Dashboard:
    def __init__(self, nc, event_log, targets: dict[str, str]):
        self.nc, self.log, self.targets = nc, event_log, targets
        # draws, never places; a page may show an event 50 ms late: read in bursts (shared.paced)
        self.follower = Follower(event_log, places=False, linger_s=SLOW_READER_LINGER_S)
        self.feed = Feed()
        self.follower.listeners.append(self.feed)
        self.metrics = Metrics()
        self.metrics.follow_fold(lambda: self.follower.state.last_seq, event_log.last_seq)
        self.live_streams = 0
        self._chunks: dict[tuple[int, int, int], bytes] = {}  # one update's bytes, for streams alike

    # --- pages -----------------------------------------------------------------------------

    def overview_html(self) -> str:
        state = self.follower.state
        nodes = views.fleet(state)
        return (render.fleet(nodes, views.totals(state), len(state.nodes) - len(nodes))
                + render.queue(views.queue(state)) + render.quotas(views.quotas(state)))

    async def index(self, request: Request) -> Response:
        body = (f'<div id="overview" data-fragment="/fragment/overview">{self.overview_html()}</div>'
                f'<div id="log" data-seq="{self.follower.state.last_seq}">{render.events(list(self.feed.lines))}</div>')
        return _html(render.page("fleet", body))

    async def overview(self, request: Request) -> Response:
        return _html(self.overview_html())

    async def claim(self, request: Request) -> Response:
        given = request.params["claim_id"]
        body, status = await self.claim_html(given)
        wrapped = f'<div id="overview" data-fragment="{render.claim_href(given, "/fragment/claim/")}">{body}</div>'
        return _html(render.page(f"claim {given}", wrapped), status)

    async def claim_fragment(self, request: Request) -> Response:
        body, status = await self.claim_html(request.params["claim_id"])
        return _html(body, status)

    async def claim_html(self, given: str) -> tuple[str, int]:
        found = await self.ask(subjects.query("claim.resolve"), {"claim_id": given})
        if not found.get("ok"):
            return render_claim.not_found(given, found["error"]["message"]), 404
        explained = await self.ask(subjects.query("claim.explain"), {"claim_id": found["data"]["claim_id"]})
        if not explained.get("ok"):
            return render_claim.not_found(given, explained["error"]["message"]), 404
        return render_claim.claim_page(explained["data"]), 200

    async def ask(self, subject: str, payload: dict) -> dict:
        try:
            msg = await self.nc.request(subject, msgspec.json.encode(payload), timeout=5)
        except Exception as err:  # the claim service is down or restarting: say so on the page
            return {"ok": False, "error": {"message": f"the claim service did not answer ({type(err).__name__})"}}
        return msgspec.json.decode(msg.data)

    # --- live updates ------------------------------------------------------------------------

    async def live(self, request: Request) -> Stream | Response:
        """Server-sent events: each new event log line as it is folded, a keep-alive otherwise.
        Each update carries its last sequence as the event's id, which a browser sends back as
        `Last-Event-ID` when it reconnects (to the same URL, the same `after`): the stream goes on
        from there, not from `after` again, which showed every line since the page loaded twice."""
        after = request.query.get("after", "0").strip() or "0"
        if not _is_seq(after):
            return Response(f"after: a log sequence number (a whole number >= 0), got {after[:40]!r}\n", 400)
        resumed = request.headers.get("last-event-id", "").strip()
        start = max(int(after), int(resumed) if _is_seq(resumed) else 0)
        if self.live_streams >= MAX_LIVE:
            return Response(f"too many live updates open ({self.live_streams}, at most {MAX_LIVE}): close "
                            "some dashboard pages, or reload this one later\n", 503)
        return Stream(self._lines_after(start))

    async def _lines_after(self, after: int):
        self.live_streams += 1
        try:
            while True:
                lines = await self.feed.wait_after(after, timeout=KEEPALIVE_S)
                if lines:
                    yield self._chunk(after, lines)
                    after = lines[-1].seq
                else:
                    yield b": keep-alive\n\n"
                await asyncio.sleep(0.25)  # at most four updates a second, whatever the load
        finally:
            self.live_streams -= 1

    def _chunk(self, after: int, lines: list) -> bytes:
        """One update's bytes; pages that had read as far get the same, encoded once."""
        key = (after, lines[-1].seq, len(lines))
        chunk = self._chunks.get(key)
        if chunk is None:
            if len(self._chunks) >= 4 * MAX_LIVE:
                self._chunks.clear()
            data = json.dumps([_item(line) for line in lines])
            chunk = self._chunks[key] = f"event: lines\nid: {lines[-1].seq}\ndata: {data}\n\n".encode()
        return chunk

    # --- metrics -----------------------------------------------------------------------------

    async def merged_metrics(self, request: Request) -> Response:
        texts = dict(await asyncio.gather(*(self._scrape(n, u) for n, u in self.targets.items())))
        texts["dashboard"] = (await self.metrics.exposition()).decode()
        return Response(merge_expositions(texts), content_type="text/plain; version=0.0.4; charset=utf-8",
                        headers={"X-Merged-From": ",".join(sorted(texts))})

    async def _scrape(self, name: str, url: str) -> tuple[str, str | None]:
        try:
            status, body = await fetch(url)
        except Exception:  # down, restarting: reported as gpuledger_scrape_up 0
            return name, None
        return name, body.decode() if status == 200 else None

    async def healthz(self, request: Request) -> Response:
        return Response(f"ok {self.follower.state.last_seq}\n")


def _is_seq(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 20


def _html(body: str, status: int = 200) -> Response:
    return Response(body, status, content_type="text/html; charset=utf-8")


def routes(dashboard: Dashboard, login: Login | None = None) -> Router:
    """The dashboard's routes; with `login` (main always gives one: services/dashboard/login.py)
    every page but /healthz and the static files asks it first."""
    guard = login.guard if login is not None else (lambda handler: handler)
    router = Router()
    router.get("/", guard(dashboard.index))
    router.get("/fragment/overview", guard(dashboard.overview))
    router.get("/claim/{claim_id}", guard(dashboard.claim))
    router.get("/fragment/claim/{claim_id}", guard(dashboard.claim_fragment))
    router.get("/live", guard(dashboard.live))
    router.get("/metrics", guard(dashboard.merged_metrics))
    router.get("/healthz", dashboard.healthz)
    router.static("/static", STATIC)
    return router
