"""`gpuledger status`'s `log_idle_s` (and the "log is not moving" verdict built on it) compares the
server's times only: its time of answering against its time of the last append (session 33).
Before, it was this host's clock against the server's, so a host an hour ahead saw a log that had
just moved as idle for an hour (and, with nodes ready, stalled). Real nats-server."""

from __future__ import annotations

import time
import types

import nats

from gpuledger_cli import status
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.service.helpers import h100_node, register_nodes

HOUR = 3600.0


async def test_a_host_an_hour_ahead_of_the_server_sees_a_log_that_just_moved(fresh_nats, monkeypatch):
    nc = await nats.connect(fresh_nats.url)
    try:
        await ensure_streams(nc.jetstream())
        await register_nodes(JetStreamEventLog(nc), h100_node("n1"))
    finally:
        await nc.close()
    monkeypatch.setattr(status, "time", types.SimpleNamespace(time=lambda: time.time() + HOUR))
    report = await status.gather_status(fresh_nats.url, 2.0)
    assert report["log_last_seq"] >= 1
    assert report["log_idle_s"] < HOUR / 2  # moments, by the server's clock (an hour by this host's)
