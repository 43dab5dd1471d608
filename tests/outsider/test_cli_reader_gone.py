"""`gpuledger events replay | head` (session 32): once `head` had its lines and left, the next write
raised BrokenPipeError, which unwound through the log reader's async generators and printed three
tracebacks ("an error occurred during closing of asynchronous generator", "aclose(): asynchronous
generator is already running", "Task was destroyed but it is pending!"), exit 1. Now the CLI stops
at once and quietly, as `cat` does (exit 141, a shell's 128 + SIGPIPE)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog


async def test_a_reader_that_leaves_early_gets_no_tracebacks(fresh_client, fresh_nats):
    log = JetStreamEventLog(fresh_client)
    for i in range(1500):  # about 110 KB of lines: more than a pipe holds
        await log.append(subjects.node("node-a"), ev.NodeHeartbeat(node="node-a", at=float(i)))
    cli = [sys.executable, "-c", "from gpuledger_cli.main import app; app()", "events", "replay", "--from-seq", "1",
           "--nats-url", fresh_nats.url]

    def replay_into_head() -> subprocess.CompletedProcess:
        writer = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
        first = writer.stdout.readline()
        writer.stdout.close()  # what `head -1` does once it has its line
        try:
            _, err = writer.communicate(timeout=120)
        finally:
            writer.kill()
        return subprocess.CompletedProcess(cli, writer.returncode, first, err)

    done = await asyncio.to_thread(replay_into_head)
    assert b"NodeHeartbeat" in done.stdout, done.stdout
    assert done.stderr == b"", done.stderr.decode()[-2000:]
    assert done.returncode == 141, done.returncode
