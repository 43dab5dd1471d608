"""A Node.js publishing system (npm `nats`, tests/contract/js/system_publisher.mjs), written from
docs/contract.md, as its own NATS user on a server with gpuledger's permissions: it submits, renews
and releases its own claim, reads its own outcome, and is refused another system's claim, outcome and
intake subject."""

from __future__ import annotations

import asyncio
import json

from schemas import systems
from tests.contract.node import require_node, run_node
from tests.contract.test_outcomes import outcome_when
from tests.service.helpers import request


async def test_a_node_system_renews_and_releases_its_own_claim_and_is_refused_another_s(tenants):
    require_node()
    render = await tenants.server.connect("system-render")
    await render.nc.jetstream().publish(systems.intake("render"), json.dumps(
        {"claim_id": "render-7", "namespace": "team-c", "gpus": 1}).encode(), headers={"Nats-Msg-Id": "render-7"})
    await outcome_when(render.nc.jetstream(), "render-7", lambda o: o.status in ("allocated", "bound"),
                       system="render")

    claim = {"claim_id": "js.billing-1", "namespace": "team-b", "gpus": 2, "lease_seconds": 300}
    out = await asyncio.to_thread(run_node, "system_publisher.mjs", json.dumps(claim), "render-7", "render",
                                  env={"GPULEDGER_SYSTEM_URL": tenants.url("system-billing"),
                                       "GPULEDGER_SYSTEM": "billing"})
    assert out["ack"] == {"stream": "GPULEDGER_INTAKE", "duplicate": False}
    assert out["seen"][-1] == "allocated", out
    assert out["own"] == {"status": "allocated", "system": "billing", "claim_id": "js.billing-1"}, out["own"]
    # render's outcome: nats-server refuses billing both the direct get and the subscription
    assert out["otherGet"] == "PERMISSIONS_VIOLATION" and out["otherSubscribe"] == "PERMISSIONS_VIOLATION", out
    assert out["renew"]["ok"] and out["renew"]["data"]["system"] == "billing", out["renew"]
    assert out["activity"] == {"ok": True, "data": {"claim_id": "js.billing-1"}}
    for refused in (out["releaseOther"], out["renewOther"]):
        assert not refused["ok"] and refused["error"]["code"] == "forbidden", refused
        assert "render-7" in refused["error"]["message"] and refused["error"]["field"] == "claim_id"
    assert out["otherIntake"] == "PERMISSIONS_VIOLATION", out["otherIntake"]  # nats-server said no
    assert out["release"]["ok"] and out["release"]["data"]["status"] == "released", out["release"]
    other = await request(tenants.ops, "gpu.qry.claim.get", {"claim_id": "render-7"})
    assert other["data"]["status"] in ("allocated", "bound") and other["data"]["system"] == "render"
