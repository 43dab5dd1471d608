"""The dashboard as an operator sees it, in a real headless Chromium against `gpuledger up
--demo`: held cards take their claim's colour, free ones stay grey, the queue says why a claim
waits, a claim's page (reached by an id prefix) shows devices, islands, score and history, and a
release gives the cards back on the next look."""

from __future__ import annotations

import json

import pytest

from services.dashboard.views import FREE_COLOUR, colour_of
from tests.ops_ux.browser import dom, pixels_of, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
HELD = "dash-held-7f3a91"
WAITING = "dash-waits-c2e8"
CARD_AREA = 54 * 44  # CSS pixels of one card at scale 1 (style.css)


def test_fleet_queue_and_claim_pages_show_the_ledger(demo, tmp_path):
    held = json.loads(demo.cli("claim", "submit", "-n", "team-a", "--gpus", "2", "--model", "H100",
                               "--id", HELD, "--wait", "30", "--json").stdout)
    assert held["status"] in ("allocated", "bound")
    demo.cli("claim", "submit", "-n", "team-b", "--gpus", "16", "--model", "H100", "--id", WAITING,
             "--wait", "5")
    home = demo.lines["GPULEDGER_DASHBOARD"]

    fleet = screenshot(home, tmp_path / "fleet.png")
    assert pixels_of(fleet, colour_of(HELD)) > 1.2 * CARD_AREA  # two cards, less their labels
    assert pixels_of(fleet, FREE_COLOUR) > 10 * CARD_AREA  # the demo fleet has dozens free
    page = dom(home)
    assert f'title="GPU {held["devices"][0]["index"]} H100' in page and HELD in page
    assert WAITING in page and "16 x H100" in page  # the queue, with its reason
    assert "lack 16 x H100" in page

    claim = screenshot(f"{home}claim/{HELD[:12]}", tmp_path / "claim.png", 1100, 800)
    assert pixels_of(claim, colour_of(HELD)) > 50  # the claim's swatch
    text = dom(f"{home}claim/{HELD[:12]}")
    assert f'<span id="claim-id">{HELD}</span>' in text
    assert "nvlink-group-" in text and "scored" in text and "submitted" in text
    assert "allocated on " + held["node"] in text

    demo.cli("claim", "release", HELD)
    after = screenshot(home, tmp_path / "fleet-after.png")
    assert pixels_of(after, colour_of(HELD)) == 0


def test_an_unknown_claim_page_says_so(demo):
    text = dom(f"{demo.lines['GPULEDGER_DASHBOARD']}claim/no-such-claim-x")
    assert "No claim no-such-claim-x" in text and "no claim id starts with it" in text
