"""The publishing snippets of README.md and docs/contract.md run as written against a real stack,
with the server and the publisher user taken from GPULEDGER_PUBLISHER_URL."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, running

REPO = Path(__file__).resolve().parents[2]


def publishing_snippet(doc: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(), re.S)
    found = [b for b in blocks if "gpu.intake.claim" in b]
    assert len(found) == 1, f"{doc}: expected one Python publishing snippet"
    return found[0]


@pytest.mark.parametrize("doc", ["README.md", "docs/contract.md"])
def test_the_snippet_reads_the_server_from_the_environment(doc):
    snippet = publishing_snippet(doc)
    assert 'os.environ["GPULEDGER_PUBLISHER_URL"]' in snippet and "4222" not in snippet


@pytest.mark.parametrize("doc", ["README.md", "docs/contract.md"])
async def test_the_snippet_prints_the_allocation(fresh_nats, doc):
    async with running(fresh_nats.url, "claim", "allocator"):
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        await nc.close()
        result = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", publishing_snippet(doc)], capture_output=True, text=True,
            timeout=60, env={**os.environ, "GPULEDGER_PUBLISHER_URL": fresh_nats.url})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("allocated {'CUDA_VISIBLE_DEVICES': ")


@pytest.mark.parametrize("doc", ["README.md", "docs/contract.md"])
async def test_the_snippet_skips_a_publish_ack_sent_to_its_outcome_subject(fresh_nats, doc):
    """Anyone who may publish to the intake can have nats-server send its publish acknowledgement
    to the snippet's outcome subject (the publish's reply subject; session 31's outsider): the
    snippet read it as an outcome and died of `KeyError: 'status'`. It skips what is not its
    claim's ClaimOutcome now (docs/contract.md, "Check that it is an outcome")."""
    import json
    import re as re_

    snippet = publishing_snippet(doc)
    claim_id = re_.search(r'"claim_id": "([^"]+)"', snippet).group(1)
    subject = "gpu.outcome.claim." + claim_id.replace(".", "_")
    async with running(fresh_nats.url, "claim", "allocator"):
        nc = await nats.connect(fresh_nats.url)
        js = nc.jetstream()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", snippet, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "GPULEDGER_PUBLISHER_URL": fresh_nats.url})
        # no node yet: the claim waits, the snippet listens (it subscribed before it published)
        for _ in range(600):
            if (await js.stream_info("GPULEDGER_INTAKE")).state.last_seq:
                break
            await asyncio.sleep(0.05)
        hostile = {"claim_id": "hostile-1", "namespace": "team-z", "gpus": 0, "cpu_milli": 1}
        await nc.publish("gpu.intake.claim", json.dumps(hostile).encode(), reply=subject,
                         headers={"Nats-Msg-Id": "hostile-1"})
        await nc.flush()
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        await nc.close()
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines()[-1].startswith("allocated {'CUDA_VISIBLE_DEVICES': ")
