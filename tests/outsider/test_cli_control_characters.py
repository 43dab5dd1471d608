"""Other people's control characters are shown as text (session 30). A publishing system releases its
own claims with a `reason` of its choosing (a bounded text, stored in the log for good): one
holding `ESC ] 0 ; ... BEL` (retitle the terminal; OSC 52 writes the clipboard in some) and
`ESC [ 2 J` (clear the screen) was printed as it came by `claim get` and `events replay`, and the
operator's terminal obeyed; click strips CSI sequences off a terminal only, never OSC."""

from __future__ import annotations

import nats

from gpuledger_cli.safe_output import printable
from schemas import subjects
from tests.cli import run_cli
from tests.service.helpers import request, running

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mred\x1b[0m\rforged\x9b1A\x08 end"


def test_control_characters_are_shown_as_text():
    assert printable(HOSTILE) == ("\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred\\x1b[0m\\x0dforged\\x9b1A\\x08 end")
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("\x1b[1mbold\x1b[0m", colours=True) == "\x1b[1mbold\x1b[0m"  # rich's, on a terminal
    assert printable("\x1b[2J", colours=True) == "\\x1b[2J"


async def test_a_release_reason_reaches_the_operator_as_text(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        try:
            claim = {"claim_id": "esc-1", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}
            assert (await request(nc, subjects.command("claim.submit"), {"claim": claim}))["ok"]
            released = await request(nc, subjects.command("claim.release"), {"claim_id": "esc-1", "reason": HOSTILE})
            assert released["ok"], released
        finally:
            await nc.close()
        for args in (("claim", "get", "esc-1"), ("events", "replay", "--subject", "gpu.evt.claim.esc-1")):
            done = await run_cli(*args, "--nats-url", fresh_nats.url)
            assert done.returncode == 0, done.stderr
            assert "\\x1b]0;PWNED\\x07" in done.stdout, done.stdout
            assert not set(done.stdout) & {"\x1b", "\x07", "\r", "\x08", "\x9b"}, repr(done.stdout)
