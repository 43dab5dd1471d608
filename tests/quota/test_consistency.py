"""Every quota command and view agrees, through the CLI in-process against the real services and
read models (issue 12: `quota list` printed an empty table while `projection status` counted 2
quotas: the read models keep a quota row for every namespace with use, quota or not, while the
list showed only namespaces with a quota of their own)."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running


@pytest.fixture
async def stack(fresh_nats, tmp_path):
    db = f"sqlite:///{tmp_path / 'readmodel.db'}"
    async with running(fresh_nats.url, "quota", "claim", "allocator", "projector", db_url=db,
                       release_unused_after_s=300.0):
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("n1", 4))
        yield fresh_nats.url, db, nc
        await nc.close()


async def cli(*args: str) -> tuple[int, str]:
    """The CLI in a thread (it runs its own event loop), like a user at a shell."""
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    return result.exit_code, result.output


async def caught_up(url: str, db: str) -> dict:
    for _ in range(400):
        code, out = await cli("projection", "status", "--db", db, "--json", "--nats-url", url)
        if code == 0 and json.loads(out)["behind"] == 0:
            return json.loads(out)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the projector did not catch up: {out}")


async def views(url: str, db: str) -> dict:
    """What each view says about which namespaces have quota rows, and where their quota comes from."""
    projection = await caught_up(url, db)
    listed = json.loads((await cli("quota", "list", "--json", "--nats-url", url))[1])
    status = json.loads((await cli("quota", "status", "--json", "--nats-url", url))[1])
    got = {q["namespace"]: json.loads((await cli("quota", "get", q["namespace"], "--json", "--nats-url", url))[1])
           for q in listed}
    return {"projection": projection, "list": {q["namespace"]: q["source"] for q in listed},
            "status": {q["namespace"]: q["source"] for q in status["quotas"]},
            "get": {ns: q["source"] for ns, q in got.items()},
            "used": {ns: q["used"]["workers"] for ns, q in got.items()}}


async def test_list_get_status_and_the_read_models_agree(stack):
    url, db, _ = stack
    for namespace in ("team-a", "team-b"):  # the quick start: claims, no quota yet
        code, out = await cli("claim", "submit", "-n", namespace, "--gpus", "1", "--wait", "10",
                              "--nats-url", url)
        assert code == 0 and "allocated" in out, out
    seen = await views(url, db)
    assert seen["projection"]["quotas"] == {"namespaces": 2, "own": 0, "without": 2}
    assert seen["list"] == seen["status"] == seen["get"] == {"team-a": "none", "team-b": "none"}
    assert seen["used"] == {"team-a": 1, "team-b": 1}
    code, out = await cli("quota", "list", "--nats-url", url)
    assert "team-a" in out and "team-b" in out and "none (unlimited)" in out  # not an empty table

    assert (await cli("quota", "set", "team-a", "--requests-vram", "160Gi", "--nats-url", url))[0] == 0
    assert (await cli("quota", "default", "set", "--max-workers", "4", "--nats-url", url))[0] == 0
    seen = await views(url, db)
    assert seen["projection"]["quotas"] == {"namespaces": 2, "own": 1, "without": 1}
    assert seen["list"] == seen["status"] == seen["get"] == {"team-a": "own", "team-b": "default"}
    code, out = await cli("projection", "status", "--db", db, "--nats-url", url)
    assert "quotas    2 namespaces: 1 with a quota of their own, 1 with use and none of their own" in out


async def test_an_allocation_nothing_runs_on_is_released_and_every_view_says_why(stack):
    url, db, nc = stack
    code, out = await cli("claim", "submit", "-n", "team-a", "--id", "idle-1", "--wait", "10",
                          "--json", "--nats-url", url)
    claim = json.loads(out)
    assert claim["status"] == "allocated", claim
    uuid = claim["devices"][0]["uuid"]
    log = JetStreamEventLog(nc)
    # the node agent's clock: it saw the device idle from its first report after the allocation on
    # (idle time is judged in its own times only: core/timers.py)
    first = claim["allocated_at"] + 1.0
    for at in (first, first + 301.0):
        await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", at=at, devices=[
            DeviceUsage(uuid=uuid, pids=[])]))
    await log.append(subjects.node("n1"), ev.NodeHeartbeat(node="n1", at=time.time()))
    for _ in range(400):
        got = await request(nc, subjects.query("claim.explain"), {"claim_id": "idle-1"})
        if got["data"]["status"] == "released":
            break
        await asyncio.sleep(0.05)
    assert got["data"]["end_reason"].startswith("unused: no process on its devices from ")
    assert got["data"]["history"][-1].split(" ", 1)[1].startswith("released unused: no process on its devices")
    code, out = await cli("quota", "status", "team-a", "--nats-url", url)
    assert "released unused: idle-1: no process on its devices" in out
    assert (await views(url, db))["used"] == {"team-a": 0}
