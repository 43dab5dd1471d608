"""One NVLink island, required (session 32). The README said whole-GPU claims prefer one NVLink
island; in the demo a 4-GPU claim went to GPUs 2, 3, 6, 7 of a half-used node (islands 0 and 1)
while three nodes had whole islands free: the preference holds on the node the policy picks, which
it picks for fragmentation. A claim may require one island (`"policy": "contiguous"`, seed 001's
field), but `claim submit` had no way to ask for it. Now `--contiguous`, and the README says both."""

from __future__ import annotations

import json

import nats

from shared.jetstream import JetStreamEventLog
from tests.cli import run_cli
from tests.fleet import h100_node
from tests.service.helpers import register_nodes, running


async def _submit(url: str, claim_id: str, gpus: int, *extra: str) -> dict:
    done = await run_cli("claim", "submit", "--id", claim_id, "--namespace", "team-a", "--gpus", str(gpus),
                         "--wait", "5", "--json", *extra, "--nats-url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


async def test_contiguous_waits_for_one_island_where_the_default_spans_two(fresh_nats):
    url = fresh_nats.url
    async with running(url, "claim", "allocator"):
        nc = await nats.connect(url)
        try:
            await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))  # islands 0-3, 4-7
        finally:
            await nc.close()
        # three GPUs of each island taken: GPUs 3 and 7 are free, one in each island
        for claim_id in ("fill-0", "fill-1"):
            assert (await _submit(url, claim_id, 3))["status"] == "allocated"
        held = await _submit(url, "one-island", 2, "--contiguous")
        assert held["status"] == "pending", held
        assert any(r["code"] == "not-contiguous" for r in held["reasons"]), held
        spans = await _submit(url, "any-island", 2)
        assert spans["status"] == "allocated", spans
        assert len({d["island"] for d in spans["devices"]}) == 2, spans
