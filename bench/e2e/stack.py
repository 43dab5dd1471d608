"""The stack under test: `gpuledger up --demo` itself, as a child process on a temporary folder.

Starting it through the command (not a copy of what it does) means the benchmark runs whatever
`up` runs: its services, its supervision, its NATS authorization. `up` prints `KEY=VALUE` lines
on stdout when everything is ready (the ops URL, and a publisher URL where the server has users).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    pass


FLEET_GROUP_MAX = 1000  # nodes in one group of a fleet spec


def fleet_spec(nodes: int) -> str:
    """Nodes of 8 H100 in two NVLink islands (the shape most claims of the mix fit), in groups of
    at most 1,000 (a fleet spec's limit; node names run on across groups)."""
    groups, left = [], nodes
    while left > 0:
        groups.append(f"{min(left, FLEET_GROUP_MAX)}xH100x8:islands=2")
        left -= FLEET_GROUP_MAX
    return ",".join(groups)


@dataclass
class Stack:
    process: asyncio.subprocess.Process
    data_dir: Path
    lines: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return self.lines["GPULEDGER_NATS_URL"]

    @property
    def publisher_url(self) -> str:
        """Where systems that only publish claims connect (the ops URL when there are no users)."""
        return self.lines.get("GPULEDGER_PUBLISHER_URL", self.url)

    async def stop(self, timeout: float = 40.0) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)  # `up` stops its children and nats-server
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()


async def start_stack(nodes: int, data_dir: Path, env: dict[str, str] | None = None,
                      ready_timeout: float = 300.0, extra_args: list[str] | None = None) -> Stack:
    """`gpuledger up --demo` with `nodes` simulated nodes (and `extra_args`, e.g. `--cluster 3`);
    returns once it printed its URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "gpuledger_cli.main", "up", "--demo", "--fleet", fleet_spec(nodes),
            "--data-dir", str(data_dir), "--ready-timeout", str(ready_timeout),
            "--no-dashboard",  # the dashboard folds the log too: not part of the claim path measured
            *(extra_args or [])]
    with open(data_dir / "up.log", "wb") as log:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
            env=_env(env), start_new_session=True, preexec_fn=_stop_with_parent)
    stack = Stack(process, data_dir)
    try:
        stack.lines = await _ready_lines(process, ready_timeout + 15)
    except BaseException:
        await stack.stop()
        raise
    if "GPULEDGER_NATS_URL" not in stack.lines:
        await stack.stop()
        tail = (data_dir / "up.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise StackError("gpuledger up did not start: " + (" | ".join(tail) or "no output"))
    return stack


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env.pop("GPULEDGER_NATS_URL", None)  # `up` starts its own server and tells its services
    return env


def _stop_with_parent() -> None:
    """Linux: the stack gets SIGINT if the benchmark dies without stopping it."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)


async def _ready_lines(process, timeout: float) -> dict[str, str]:
    """The KEY=VALUE lines `up` prints when ready: the first one waited for, the rest that follow
    it at once."""
    lines: dict[str, str] = {}
    wait = timeout
    while True:
        try:
            raw = await asyncio.wait_for(process.stdout.readline(), wait)
        except asyncio.TimeoutError:
            return lines
        key, sep, value = raw.decode(errors="replace").strip().partition("=")
        if not sep:
            return lines
        lines[key] = value
        wait = 0.5
