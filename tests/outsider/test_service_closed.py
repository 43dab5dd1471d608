"""A service whose NATS connection is closed for good exits (so `gpuledger up` or Kubernetes starts
it again) instead of living on without NATS. Found by the session-24 outsider: nats-server cut the
claim service off for a subject past its control line, nats-py closed the connection (it reconnects
after outages, not after a protocol error), and the claim service ran on, answering nothing."""

from __future__ import annotations

import asyncio

import pytest

from gpuledger_cli.services_cmd import builder_for
from shared.natscluster import INBOX_PREFIX_ENV
from shared.nats_auth import user_inbox
from shared.service import serve
from tests.service.helpers import test_settings as settings_for


async def test_a_service_whose_connection_is_closed_for_good_exits(fresh_nats, monkeypatch):
    monkeypatch.setenv(INBOX_PREFIX_ENV, user_inbox("quota"))  # serve() sets it when unset
    contexts = []

    async def build(ctx):
        contexts.append(ctx)
        await builder_for("quota")(ctx)

    served = asyncio.create_task(serve("quota", settings_for(fresh_nats.url), build))
    for _ in range(200):
        if contexts and contexts[0].nc.is_connected:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # serving
    assert not served.done()
    # a protocol error: nats-server answers -ERR 'Maximum Control Line Exceeded' and nats-py closes
    await contexts[0].nc.publish("gpu.x." + "k" * 5000, b"")
    with pytest.raises(ConnectionError, match="closed for good"):
        await asyncio.wait_for(served, 30)
