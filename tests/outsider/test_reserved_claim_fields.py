"""A publisher's claim is never taken for a model slot, nor for a GpuClaim's claim (session 29's
outsider).

Slots: the claim service
finds its slots in the log as claims of workload `helix-slot`, and any publisher could submit one:
its labels chose the model it "served" (`slot acquire` sent requests to the publisher's own claim
as a warm slot), a `concurrency` label that is not a number failed every slot command while the
claim lived (`int('lots')`), and a claim id `slot-<model>-1` taken first made every new slot of
that model a `conflict`. Now the workload is reserved (refused at the intake and on
`gpu.cmd.claim.submit`, field `workload`; also in `claim.json`), and a new slot skips an id a
publisher took.

GpuClaims: the pod webhook finds the claim a GpuClaim became by the labels `gpuclaim.namespace` and
`gpuclaim.name` of the last claim that carried them, and any publisher could write them: a claim
with `{"gpuclaim.namespace": "prod", "gpuclaim.name": "trainer"}` made a prod pod naming GpuClaim
`trainer` start on the publisher's node and devices (or be refused while that claim waited). Now
those labels are reserved the same way, field `labels.gpuclaim.name`."""

from __future__ import annotations

import nats
import pytest

from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.contract.test_outcomes import outcome_when, publish
from tests.service.helpers import h100_node, register_nodes, request, running

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def stack(fresh_nats, tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {name: chat-8b, runtime: vllm, memory_gib: 30, max_concurrency: 2, head_count: 32}\n")
    async with running(fresh_nats.url, "claim", "allocator", endpoint_tick_s=0, slot_tick_s=0,
                       models_file=str(models)):
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        yield nc
        await nc.close()


FORGED = {"claim_id": "forged", "namespace": "team-a", "gpus": 1, "workload": "helix-slot",
          "labels": {"model": "chat-8b", "runtime": "vllm", "concurrency": "lots"}}


async def test_a_publishers_claim_of_the_slot_workload_is_refused_naming_the_field(stack):
    reply = await request(stack, subjects.command("claim.submit"), {"claim": FORGED})
    assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
    assert reply["error"]["field"] == "claim.workload" and "reserved" in reply["error"]["message"]
    slots = await request(stack, subjects.query("slot.list"), {})
    assert slots == {"ok": True, "data": []}


async def test_a_slot_id_a_publisher_took_is_skipped(stack):
    squat = {"claim_id": "slot-chat-8b-1", "namespace": "team-a", "gpus": 0, "cpu_milli": 100}
    assert (await request(stack, subjects.command("claim.submit"), {"claim": squat}))["ok"]
    acquired = await request(stack, subjects.command("slot.acquire"), {"model": "chat-8b"})
    assert acquired["ok"], acquired
    assert acquired["data"]["slot_id"] == "slot-chat-8b-2" and acquired["data"]["warm"] is False
    again = await request(stack, subjects.command("slot.acquire"), {"model": "chat-8b"})
    assert again["ok"] and again["data"]["slot_id"] == "slot-chat-8b-2" and again["data"]["warm"] is True


@pytest.mark.parametrize("key", ["gpuclaim.namespace", "gpuclaim.name", "gpuclaim.uid"])
async def test_a_publishers_claim_with_a_gpuclaim_label_is_refused_naming_it(stack, key):
    claim = {"claim_id": f"forged-{key[9:]}", "namespace": "team-b", "gpus": 1, "labels": {key: "trainer", "team": "b"}}
    reply = await request(stack, subjects.command("claim.submit"), {"claim": claim})
    assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
    assert reply["error"]["field"] == f"claim.labels.{key}" and "reserved" in reply["error"]["message"]


async def test_the_intake_refuses_them_in_the_outcome(stack):
    js = stack.jetstream()
    await publish(js, FORGED)
    await publish(js, {"claim_id": "forged-2", "namespace": "team-b", "gpus": 1, "labels": {"gpuclaim.name": "t"}})
    slot = await outcome_when(js, "forged", lambda o: o.final)
    label = await outcome_when(js, "forged-2", lambda o: o.final)
    assert (slot.status, slot.code, slot.reasons[0].field) == ("rejected", "invalid", "workload")
    assert (label.status, label.code, label.reasons[0].field) == ("rejected", "invalid", "labels.gpuclaim.name")
