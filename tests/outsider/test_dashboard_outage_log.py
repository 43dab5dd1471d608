"""The dashboard through a NATS outage (session 30): after a kill -9 of nats-server under `up`,
the dashboard's log held nats-py's own error callback's output, a whole traceback for each failed
reconnect (`nats: encountered error` ... `ConnectionRefusedError`), two a second for as long as
the server is away, where every service logs one line per error (`shared.retry.quiet_error`)."""

from __future__ import annotations

import asyncio
import logging

import nats

from services.dashboard.main import connect
from shared.jetstream import ensure_streams
from shared.natscluster import INBOX_PREFIX_ENV


async def test_a_nats_outage_is_logged_in_lines_not_tracebacks(fresh_nats, caplog, monkeypatch):
    monkeypatch.setenv(INBOX_PREFIX_ENV, "_INBOX")  # connect() sets it for its own process
    setup = await nats.connect(fresh_nats.url)
    await ensure_streams(setup.jetstream())
    await setup.close()
    nc, _ = await connect(fresh_nats.url)
    try:
        with caplog.at_level(logging.WARNING):
            fresh_nats.stop()
            for _ in range(100):  # a few reconnects refused (every 0.5 s)
                if sum(r.name.startswith(("nats", "gpuledger")) for r in caplog.records) >= 3:
                    break
                await asyncio.sleep(0.1)
        told = [r for r in caplog.records if r.name.startswith(("nats", "gpuledger"))]
        assert told, "the outage must be logged"
        assert not [r for r in told if r.exc_info], [r.getMessage() for r in told if r.exc_info]
    finally:
        await nc.close()
