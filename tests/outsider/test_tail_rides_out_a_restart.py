"""`gpuledger events tail` through a nats-server restart (session 30): the CLI connected without
reconnects, so a restart of nats-server (`up` restarts it within a second) closed its connection,
and the tail went on waiting, printing nothing and saying nothing, for good. It reconnects now,
says so on stderr, and goes on from the event after the last it printed."""

from __future__ import annotations

import asyncio
import sys

import nats

from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.service.helpers import h100_node, register_nodes


async def _until_line(stream, text: str, timeout: float = 60.0) -> str:
    async def scan() -> str:
        while True:
            line = (await stream.readline()).decode()
            if not line or text in line:
                return line
    try:
        return await asyncio.wait_for(scan(), timeout)
    except asyncio.TimeoutError:
        return ""


async def _register(url: str, name: str) -> None:
    nc = await nats.connect(url)
    try:
        await ensure_streams(nc.jetstream())
        await register_nodes(JetStreamEventLog(nc), h100_node(name))
    finally:
        await nc.close()


async def test_events_tail_goes_on_after_a_nats_restart(fresh_nats):
    await _register(fresh_nats.url, "before-restart")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuledger_cli.main", "events", "tail", "--last", "5", "--nats-url", fresh_nats.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    again = None
    try:
        assert "before-restart" in await _until_line(proc.stdout, "before-restart")
        fresh_nats.stop()
        again = start_nats_server(fresh_nats.store_dir, port=fresh_nats.port)
        await _register(again.url, "after-restart")
        assert "after-restart" in await _until_line(proc.stdout, "after-restart"), "the tail stopped"
        assert "went away; reconnected to it" in await _until_line(proc.stderr, "reconnected")
    finally:
        proc.kill()
        await proc.wait()
        if again is not None:
            again.stop()
