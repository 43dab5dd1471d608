"""The dashboard's HTML on its own: a card's fill is its holder's colour (stripes when shared),
free cards are grey, cards sit in their NVLink island, and whatever a claim id or a typed path holds
ends up escaped, never as markup."""

from __future__ import annotations

import asyncio

from ledger.state import Node, State, Unit
from services.dashboard import render, views
from services.dashboard.app import Dashboard
from shared.httpserve import Request


def unit(index: int, island: int, holders: dict[str, int] | None = None) -> Unit:
    u = Unit(uuid=f"GPU-{index}", node="n1", index=index, mig_index=-1, model="H100", memory_mib=81920,
             island=island, island_name=f"nvlink-group-{island}")
    u.holders = holders or {}
    u.milli_free = 1000 - sum(u.holders.values())
    return u


def fleet_state() -> State:
    units = [unit(0, 0, {"job-a": 1000}), unit(1, 0, {"job-a": 500, "job-b": 500}), unit(2, 1)]
    state = State()
    state.nodes["n1"] = Node(name="n1", rank=0, units=units)
    state.units = {u.uuid: u for u in units}
    return state


def test_cards_take_their_holders_colours_inside_their_island():
    [node] = views.fleet(fleet_state())
    assert [i.name for i in node.islands] == ["nvlink-group-0", "nvlink-group-1"]
    held, shared, free = [c for i in node.islands for c in i.cards]
    assert held.colours == [views.colour_of("job-a")] and held.state == "allocated"
    assert shared.colours == [views.colour_of("job-a"), views.colour_of("job-b")]
    assert free.colours == [views.FREE_COLOUR] and free.state == "free"
    assert f"background:{views.colour_of('job-a')}" in render.card(held)
    assert "linear-gradient" in render.card(shared)
    assert views.colour_of("job-a") != views.colour_of("job-b") != views.FREE_COLOUR


def test_claim_ids_and_typed_paths_are_escaped():
    nasty = 'x"><script>alert(1)</script>/y'
    href = render.claim_href(nasty)
    assert "<" not in href and '"' not in href and "/y" not in href
    page = asyncio.run(Dashboard(_NoNats(), _NoLog(), {}).claim(Request("GET", "/claim/x", {},
                                                                         {"claim_id": nasty})))
    assert "<script>" not in page.body and page.status == 404


class _NoNats:
    """The claim service is down: a page must still render (and say so)."""

    async def request(self, *args, **kwargs):
        raise TimeoutError


class _NoLog:
    async def last_seq(self) -> int:
        return 0
