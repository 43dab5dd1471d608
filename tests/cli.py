"""The CLI driven in-process (typer's CliRunner) instead of a subprocess: the same commands and
output without starting Python and importing everything again for each call (seconds per test)."""

from __future__ import annotations

import asyncio
import subprocess
import traceback

from typer.testing import CliRunner


async def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """`gpuledger ARGS` as a shell would run it: its exit code, stdout and stderr. In a thread,
    since the CLI runs its own event loop; a crash shows its traceback in stderr, as it would."""
    from gpuledger_cli.main import app

    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), input=stdin or None)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, stderr)
