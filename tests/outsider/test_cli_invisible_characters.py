"""Text that reorders or hides itself reached operators' terminals (session 32). A release `reason`
(a system's own words, kept in the log for good) or a label holding U+202E RIGHT-TO-LEFT OVERRIDE
is shown backwards by terminals that apply bidi, and zero-width characters hide what is there:
"released by holder\\u202e..." can be made to read as anything ("Trojan Source"). Session 30 showed
control characters as `\\xNN`; these are no control characters (Unicode's format class), and came
through as they were. Now shown as `\\uNNNN`, like the control characters."""

from __future__ import annotations

import nats

from gpuledger_cli.safe_output import printable
from schemas import subjects
from tests.cli import run_cli
from tests.service.helpers import request, running

SPOOF = "ok \u202edetaler\u202c \u200bhidden\u2066iso\u2069\ufeff\u2028end"


def test_reordering_and_invisible_characters_are_shown_as_text():
    assert printable(SPOOF) == "ok \\u202edetaler\\u202c \\u200bhidden\\u2066iso\\u2069\\ufeff\\u2028end"
    assert printable("é 日本 team-a\t\n") == "é 日本 team-a\t\n"  # other text as it is


async def test_a_release_reason_with_a_bidi_override_reaches_the_operator_as_text(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        try:
            claim = {"claim_id": "bidi-1", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}
            assert (await request(nc, subjects.command("claim.submit"), {"claim": claim}))["ok"]
            released = await request(nc, subjects.command("claim.release"), {"claim_id": "bidi-1", "reason": SPOOF})
            assert released["ok"], released
        finally:
            await nc.close()
        done = await run_cli("claim", "get", "bidi-1", "--nats-url", fresh_nats.url)
    assert done.returncode == 0, done.stderr
    assert "\\u202edetaler" in done.stdout, done.stdout
    assert not set(done.stdout) & set("\u202e\u202c\u200b\u2066\u2069\ufeff\u2028"), repr(done.stdout)


def test_the_dashboard_shows_them_as_text_too():
    from services.dashboard import render, render_claim
    from services.dashboard.feed import Line

    page = render_claim.claim_page({"claim_id": "bidi-1", "status": "released", "namespace": "team-a",
                                    "end_reason": SPOOF, "timeline": [{"at": 1.0, "event": f"released: {SPOOF}"}]})
    item = render.event_item(Line(7, 1.0, "ClaimReleased", "bidi-1", f"claim_id=bidi-1 reason={SPOOF}"))
    for html in (page, item):
        assert "\\u202edetaler" in html, html
        assert not set(html) & set("\u202e\u202c\u200b\u2066\u2069\ufeff\u2028"), repr(html)
