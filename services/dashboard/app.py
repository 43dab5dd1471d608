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
from pathlib import Path

import msgspec

from schemas import subjects
from shared.httpserve import Request, Response, Router, Stream, fetch
from shared.metrics import Metrics
from shared.paced import SLOW_READER_LINGER_S

from ledger.follower import Follower
from services.dashboard import render, render_claim, views
from services.dashboard.feed import Feed
from services.dashboard.merge import merge_expositions

STATIC = Path(__file__).parent / "static"


class Dashboard:
    def __init__(self, nc, event_log, targets: dict[str, str]):
        self.nc, self.log, self.targets = nc, event_log, targets
        # draws, never places; a page may show an event 50 ms late: read in bursts (shared.paced)
        self.follower = Follower(event_log, places=False, linger_s=SLOW_READER_LINGER_S)
        self.feed = Feed()
        self.follower.listeners.append(self.feed)
        self.metrics = Metrics()
        self.metrics.follow_fold(lambda: self.follower.state.last_seq, event_log.last_seq)

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
        """Server-sent events: each new event log line as it is folded, a keep-alive otherwise."""
        after = request.query.get("after", "0").strip() or "0"
        if not (after.isascii() and after.isdigit() and len(after) <= 20):
            return Response(f"after: a log sequence number (a whole number >= 0), got {after[:40]!r}\n", 400)
        return Stream(self._lines_after(int(after)))

    async def _lines_after(self, after: int):
        while True:
            lines = await self.feed.wait_after(after, timeout=15.0)
            if lines:
                after = lines[-1].seq
                data = json.dumps([render.event_item(line) for line in lines])
                yield f"event: lines\ndata: {data}\n\n".encode()
            else:
                yield b": keep-alive\n\n"
            await asyncio.sleep(0.25)  # at most four updates a second, whatever the load

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


def _html(body: str, status: int = 200) -> Response:
    return Response(body, status, content_type="text/html; charset=utf-8")


def routes(dashboard: Dashboard) -> Router:
    router = Router()
    router.get("/", dashboard.index)
    router.get("/fragment/overview", dashboard.overview)
    router.get("/claim/{claim_id}", dashboard.claim)
    router.get("/fragment/claim/{claim_id}", dashboard.claim_fragment)
    router.get("/live", dashboard.live)
    router.get("/metrics", dashboard.merged_metrics)
    router.get("/healthz", dashboard.healthz)
    router.static("/static", STATIC)
    return router
