"""`gpuledger up` stops at once on Ctrl-C (SIGINT or SIGTERM) while it waits for the stack to be
ready, not after the whole ready timeout (90 s). Found by the session-24 outsider: a stack whose
claim service could not start ignored Ctrl-C for a minute and a half."""

from __future__ import annotations

import asyncio

import pytest

from gpuledger_cli.up import StoppedWhileStarting, _start_and_wait


async def test_a_stop_while_starting_ends_the_wait(fresh_nats):
    calls = []

    def stopped() -> bool:
        calls.append(1)
        return len(calls) > 2  # Ctrl-C a moment after the start

    with pytest.raises(StoppedWhileStarting):
        # a service that never announces itself: without the stop the wait runs its hour
        await asyncio.wait_for(_start_and_wait([], fresh_nats.url, ["never-ready"], 0, 3600, stopped=stopped), 60)
