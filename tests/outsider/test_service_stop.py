"""A service stopped (SIGTERM) while NATS is away exits. Found by the session-26 outsider: after a
`kill -9` of `gpuledger up`, stopping what it left running (nats-server and the services at once)
left the allocator, quota and pool controller running for good: `stop_service` raised nats-py's
"connection reconnecting" from the broker's drain, and `asyncio.run` then waited for ever for
tasks that swallow their cancel while nats-py reconnects."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from gpuledger_cli.services_cmd import builder_for
from shared.natsserver import start_nats_server
from shared.service import start_service, stop_service
from tests.service.helpers import test_settings as settings_for


async def test_a_service_stops_cleanly_while_nats_is_away(tmp_path, caplog):
    server = start_nats_server(tmp_path / "nats")
    ctx = await start_service("quota", settings_for(server.url), builder_for("quota"))
    server.process.kill()
    server.process.wait()
    for _ in range(200):
        if ctx.nc.is_reconnecting:
            break
        await asyncio.sleep(0.05)
    assert ctx.nc.is_reconnecting
    await asyncio.wait_for(stop_service(ctx), 30)  # raised ConnectionReconnectingError
    assert ctx.nc.is_closed
    assert "broker did not drain (ConnectionReconnectingError" in caplog.text


STUBBORN = """
import asyncio, logging
from shared.service import leaving_nothing_behind

async def stubborn():  # as nats-py's loops do while reconnecting
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

async def serve():
    asyncio.get_running_loop().create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0.1)

logging.basicConfig()
asyncio.run(leaving_nothing_behind(serve(), grace_s=0.5))
"""


def test_a_task_that_ignores_its_cancel_does_not_keep_the_process_alive():
    done = subprocess.run([sys.executable, "-c", STUBBORN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert "1 task(s) ignored their cancel for 0.5s: stubborn (stubborn)" in done.stderr
