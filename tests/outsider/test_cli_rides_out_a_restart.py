"""A command sent while its service restarts (session 30): `up` starts a service that died again
within a second or two, and `gpuledger claim submit` sent in between failed at once with "no answer
on gpu.cmd.claim.submit within 30s (no responders: nobody listens on this subject)" (in no time,
whatever it said). A "no responders" request reached no one, so the CLI sends it again until its
timeout when gpuledger runs on the server (its intake stream is there), and says so on stderr;
where gpuledger never ran it still fails at once, naming that."""

from __future__ import annotations

import asyncio
import json
import sys

import nats

from shared.jetstream import ensure_streams
from tests.service.helpers import running
from tests.cli import invoke


async def _line(stream, timeout: float) -> str:
    try:
        return (await asyncio.wait_for(stream.readline(), timeout)).decode()
    except asyncio.TimeoutError:
        return ""


async def test_a_submit_sent_while_the_claim_service_is_down_waits_for_it(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())  # gpuledger ran here; no claim service now
    await nc.close()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuledger_cli.main", "claim", "submit", "-n", "team-a", "--gpus", "0",
        "--cpu-milli", "10", "--json", "--nats-url", fresh_nats.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        told = await _line(proc.stderr, 60)  # before the fix: the error line, and the CLI exits 1
        assert "nobody answers on gpu.cmd.claim.submit yet" in told, told
        async with running(fresh_nats.url, "claim"):
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["namespace"] == "team-a"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_where_gpuledger_never_ran_a_request_fails_at_once_saying_so(fresh_nats):
    done = invoke("claim", "list", "--nats-url", fresh_nats.url)
    assert done.returncode == 1
    assert "nobody answers on gpu.qry.claim.list" in done.stderr
    assert "no GPULEDGER_INTAKE stream: gpuledger has not run here" in done.stderr
    assert "trying again" not in done.stderr
