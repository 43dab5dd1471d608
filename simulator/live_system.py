"""The whole system for one live run when none is given: `gpuledger up` (no demo fleet) on a
temporary data folder, stopped with SIGINT at the end and its folder removed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path


class SystemStartError(RuntimeError):
    pass


@contextlib.asynccontextmanager
async def started_system(ready_timeout: float = 120.0, env: dict[str, str] | None = None):
    """Yield the NATS URL of a freshly started `gpuledger up`; stop it on exit."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-live-") as tmp:
        data, log_path = Path(tmp) / "data", Path(tmp) / "up.log"
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpuledger_cli.main", "up", "--data-dir", str(data),
                "--ready-timeout", str(ready_timeout), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=log, start_new_session=True,
                env=_env(env), preexec_fn=_stop_with_parent)
        try:
            yield await _url_line(proc, log_path, ready_timeout + 15)
        finally:
            await _stop(proc)


def _stop_with_parent() -> None:
    """Linux: SIGINT to the system if this process dies without stopping it (SIGKILL, a test
    timeout), so no `gpuledger up` is left running on its own. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env.pop("GPULEDGER_NATS_URL", None)  # `up` starts its own server and tells its services
    return env


async def _url_line(proc, log_path: Path, timeout: float) -> str:
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()
    except asyncio.TimeoutError:
        line = ""
    if not line.startswith("GPULEDGER_NATS_URL="):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        raise SystemStartError("could not start the system (gpuledger up): " + (" | ".join(tail) or "no output"))
    return line.split("=", 1)[1]


async def _stop(proc) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)  # `up` stops its services and nats-server on SIGINT
        try:
            await asyncio.wait_for(proc.wait(), 40)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
