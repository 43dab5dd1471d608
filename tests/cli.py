"""The CLI driven in-process (typer's CliRunner) instead of a subprocess: the same commands and
output without starting Python and importing everything again for each call (seconds per test)."""

from __future__ import annotations

import asyncio
import subprocess
import traceback

from typer.testing import CliRunner


def invoke(*args: str, stdin: str = "", env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """`gpuledger ARGS` as a shell would run it, in this thread: its exit code, stdout and stderr
    (`env` sets variables for the call, None unsets one); a crash shows its traceback in stderr."""
    from gpuledger_cli.main import app

    result = CliRunner().invoke(app, list(args), input=stdin or None, env=env)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, stderr)


async def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """`invoke` from a test's event loop: in a thread, since the CLI runs its own loop."""
    return await asyncio.to_thread(invoke, *args, stdin=stdin)
