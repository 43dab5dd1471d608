"""The dashboard stays live without reloads: its event stream (server-sent events) delivers a new
claim's line as it is folded, and the page fragment the script refetches shows the claim."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest

from shared.httpserve import fetch

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_a_new_claim_reaches_an_open_page(demo):
    asyncio.run(_watch(demo))


async def _watch(demo) -> None:
    home = urlsplit(demo.lines["GPULEDGER_DASHBOARD"])
    reader, writer = await asyncio.open_connection(home.hostname, home.port)
    writer.write(f"GET /live?after=0 HTTP/1.1\r\nHost: {home.netloc}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert b"200 OK" in head and b"text/event-stream" in head
    await asyncio.to_thread(demo.cli, "claim", "submit", "-n", "team-l", "--gpus", "1", "--model", "H100",
                            "--id", "live-e2f1", "--wait", "20")
    seen = ""
    while "live-e2f1" not in seen:
        block = (await asyncio.wait_for(reader.readuntil(b"\n\n"), 20)).decode()
        if block.startswith("event: lines"):
            seen += " ".join(json.loads(block.split("data: ", 1)[1]))
    writer.close()
    assert "ClaimSubmitted" in seen
    status, body = await fetch(f"{demo.lines['GPULEDGER_DASHBOARD']}fragment/overview")
    assert status == 200 and b"live-e2f1" in body
