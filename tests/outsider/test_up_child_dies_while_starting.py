"""`gpuledger up` tends its children while it waits for them to be ready, as it does after: a
service that dies before it announced itself is started again, one that keeps dying ends the wait
at once, and a timeout says what each missing service last logged. CI once waited its whole
300 s ready timeout on a service that never announced itself, and kept no log to say why."""

from __future__ import annotations

import asyncio
import itertools
import sys

import pytest

from gpuledger_cli.up import Child, _start_and_wait, _units
from gpuledger_cli.up_supervise import MAX_RESTARTS, Supervisor


def _child(tmp_path, argv: list[str]) -> Child:
    return Child("never-ready", argv, {}, tmp_path)


async def test_a_child_that_keeps_dying_while_starting_ends_the_wait_at_once(fresh_nats, tmp_path):
    # a shell, not Python: it dies within a look even on a loaded machine (a run that lasted
    # STABLE_S on the clock below would forgive the deaths before it)
    child = _child(tmp_path, ["/bin/sh", "-c", "echo 'boom: address already in use'; exit 2"])
    said: list[str] = []
    ticks = itertools.count()
    # a clock that runs 10.5 s per look: every pause between restarts (at most 10 s) is over at the next
    supervisor = Supervisor(_units([child], None), said.append, clock=lambda: 10.5 * next(ticks))
    with pytest.raises(RuntimeError, match="kept dying"):
        await asyncio.wait_for(_start_and_wait([child], fresh_nats.url, ["never-ready"], 0, 3600,
                                               supervisor=supervisor), 120)
    assert sum("exited with code 2; restarting" in line for line in said) == MAX_RESTARTS
    assert "giving up" in said[-1]
    assert child.log_path.read_text().count("boom") == MAX_RESTARTS + 1  # the first run and each restart


async def test_a_timeout_says_what_each_missing_service_last_logged(fresh_nats, tmp_path):
    child = _child(tmp_path, [sys.executable, "-c",
                              "import time; print('waiting for the streams', flush=True); time.sleep(120)"])
    try:
        with pytest.raises(TimeoutError) as raised:
            await asyncio.wait_for(_start_and_wait([child], fresh_nats.url, ["never-ready"], 0, 3), 120)
    finally:
        child.process.kill()
        child.process.wait()
    assert "services not up: ['never-ready']" in str(raised.value)
    assert "never-ready (running) last logged: waiting for the streams" in str(raised.value)
