"""A service whose metrics port is taken (another program, or two starts that picked the same
free port) serves the ledger without /metrics and says so, instead of exiting: it exited before it
announced itself, and `gpuledger up` restarted it into the same taken port until it gave up."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket

from gpuledger_cli.services_cmd import builder_for
from shared.natscluster import INBOX_PREFIX_ENV
from shared.nats_auth import user_inbox
from shared.service import READY_SUBJECT, serve
from tests.service.helpers import test_settings as settings_for


async def test_a_taken_metrics_port_costs_the_metrics_not_the_service(fresh_nats, fresh_client, monkeypatch,
                                                                        caplog):
    monkeypatch.setenv(INBOX_PREFIX_ENV, user_inbox("quota"))  # serve() sets it when unset
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    ready = asyncio.Event()

    async def on_ready(msg) -> None:
        ready.set()

    await fresh_client.subscribe(f"{READY_SUBJECT}.quota", cb=on_ready)
    await fresh_client.flush()
    settings = dataclasses.replace(settings_for(fresh_nats.url), metrics_port=port)
    with caplog.at_level(logging.ERROR, logger="gpuledger"):
        served = asyncio.create_task(serve("quota", settings, builder_for("quota")))
        try:
            await asyncio.wait_for(ready.wait(), 60)
            assert not served.done()
        finally:
            served.cancel()
            await asyncio.gather(served, return_exceptions=True)
            taken.close()
    assert f"cannot serve metrics on 127.0.0.1:{port}" in caplog.text
