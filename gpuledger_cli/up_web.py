"""What `gpuledger up` adds for operators: a metrics port per child, the dashboard process (which
also serves the one scrape endpoint for the whole stack), and the lines it prints for them.

Each service serves its own `/metrics` on a port `up` assigns (GPULEDGER_METRICS_PORT); the
dashboard process scrapes them all and serves the merged text, each series labelled with the
service it came from, at `GPULEDGER_METRICS`. Every port is remembered in the data dir
(`gpuledger_cli.ports`), so a Prometheus pointed at them keeps working across restarts.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request

from gpuledger_cli.ports import PortBook

DASHBOARD = "dashboard"


def metrics_port_env(book: PortBook, child: str) -> dict[str, str]:
    """The environment that makes a child serve /metrics on its remembered port."""
    return {"GPULEDGER_METRICS_PORT": str(book.take(f"metrics-{child}"))}


def targets(book: PortBook, children: list[str]) -> str:
    """`name=url,...` of every child's /metrics, for the dashboard to merge."""
    return ",".join(f"{name}=http://127.0.0.1:{book.ports[f'metrics-{name}']}/metrics" for name in children)


def dashboard_command(book: PortBook, children: list[str]) -> tuple[list[str], dict[str, str]]:
    """The dashboard child's argv and the environment it adds (its port, what it merges)."""
    env = {"GPULEDGER_DASHBOARD_PORT": str(book.take(DASHBOARD)),
           "GPULEDGER_METRICS_TARGETS": targets(book, children)}
    return [sys.executable, "-m", "services.dashboard"], env


def printed_lines(book: PortBook) -> list[tuple[str, str]]:
    base = f"http://127.0.0.1:{book.ports[DASHBOARD]}"
    return [("GPULEDGER_METRICS", f"{base}/metrics"), ("GPULEDGER_DASHBOARD", f"{base}/")]


async def wait_http(url: str, timeout: float) -> None:
    """Until `url` answers 200 (the dashboard has no NATS identity to announce itself with)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = "no answer"
    while loop.time() < deadline:
        try:
            status = await asyncio.to_thread(_status, url)
            if status == 200:
                return
            last = f"HTTP {status}"
        except OSError as err:
            last = str(err)
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{url} not answering after {timeout:g}s ({last})")


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status
