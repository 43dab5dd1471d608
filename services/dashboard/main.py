"""Start the dashboard: connect to NATS (waiting for it), follow the log, serve HTTP until stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from shared.jetstream import JetStreamEventLog
from shared.nats_auth import user_inbox
from shared.natscluster import INBOX_PREFIX_ENV, connect_args
from shared.retry import quiet_error
from shared.settings import env_port

from services.dashboard.app import Dashboard, routes
from services.dashboard.login import Login

log = logging.getLogger("gpuledger.dashboard")


def parse_targets(raw: str) -> dict[str, str]:
    """`claim=http://127.0.0.1:1234/metrics,allocator=...` -> {name: url}; a malformed entry is an
    error naming it, not a silently missing service."""
    targets = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, url = entry.partition("=")
        if not sep or not name or not url.startswith("http"):
            raise SystemExit(f"GPULEDGER_METRICS_TARGETS: expected name=http://host:port/metrics, got {entry!r}")
        targets[name] = url
    return targets


async def connect(url: str):
    """nats-py, retrying until the server (and the stream) are there: `up` starts us with the
    services, before anyone created the stream."""
    import nats

    os.environ.setdefault(INBOX_PREFIX_ENV, user_inbox("dashboard"))  # the only inbox its user may read
    while True:
        nc = None
        try:
            # one line per error through an outage, as every service (nats-py's own callback
            # logs a traceback for each refused reconnect, two a second)
            nc = await nats.connect(**connect_args(url), max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                                    error_cb=quiet_error)
            event_log = JetStreamEventLog(nc)
            await event_log.last_seq()
            return nc, event_log
        except Exception as err:
            log.warning("waiting for NATS and the stream at %s: %s: %s", url.rsplit("@", 1)[-1],
                        type(err).__name__, err)
            if nc is not None:
                await nc.close()
            await asyncio.sleep(1.0)


async def run(url: str, host: str, port: int, targets: dict[str, str], login: Login) -> None:
    nc, event_log = await connect(url)
    dashboard = Dashboard(nc, event_log, targets)
    follow = asyncio.create_task(dashboard.follower.run(), name="dashboard-follow")
    server = await routes(dashboard, login).serve(host, port)
    log.info("dashboard on http://%s:%d/ (merging %d /metrics; %s)", host, port, len(targets),
             "login: GPULEDGER_DASHBOARD_TOKEN" if login.token else "no login, loopback names only")
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([waiter, follow], return_when=asyncio.FIRST_COMPLETED)
        if follow in done:
            follow.result()  # the follower died: exit with its error (up restarts us)
    finally:
        for task in (waiter, follow):
            task.cancel()
        server.close()
        await nc.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s dashboard %(levelname)s %(message)s")
    url = os.environ.get("GPULEDGER_NATS_URL", "nats://127.0.0.1:4222")
    port = env_port("GPULEDGER_DASHBOARD_PORT", 8080)
    host = os.environ.get("GPULEDGER_DASHBOARD_HOST", "127.0.0.1")
    login = Login.from_env(host, os.environ)  # before anything starts: a bad setting stops it at once
    asyncio.run(run(url, host, port, parse_targets(os.environ.get("GPULEDGER_METRICS_TARGETS", "")), login))
    return 0
