"""Issue 11 item 5: model slots in a real claim service with a real allocator on a real
nats-server: warm-slot reuse, concurrency, adapters, any GPU count with memory split evenly,
stale slots released by the timer and on demand."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from tests.serverless.test_slots import write_model
from tests.service.helpers import h100_node, register_nodes, request, running
from shared.jetstream import JetStreamEventLog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def models_file(tmp_path):
    write_model(tmp_path / "tiny.gguf")
    path = tmp_path / "models.yaml"
    path.write_text("""
models:
  - {name: chat-8b, runtime: vllm, memory_gib: 30, max_concurrency: 2, head_count: 32}
  - {name: big, runtime: vllm, memory_gib: 160, max_concurrency: 1, head_count: 48}
  - {name: tiny, runtime: ollama, file: tiny.gguf, context_length: 2048, max_concurrency: 4}
  - {name: huge, runtime: vllm, memory_gib: 5000}
""")
    return path


@pytest.fixture
async def stack(fresh_nats, models_file):
    async with running(fresh_nats.url, "claim", "allocator", endpoint_tick_s=0, slot_tick_s=0,
                       slot_stale_s=60.0, models_file=str(models_file)) as contexts:
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))  # 8 x H100, one node
        clock = contexts[0].slots.clock = Clock()
        yield nc, contexts[0].slots, clock
        await nc.close()


async def ask(nc, name, **fields):
    reply = await request(nc, subjects.command(f"slot.{name}") if name != "list" else subjects.query("slot.list"),
                          fields)
    assert reply["ok"], reply
    return reply["data"]


async def allocated(nc, slot_id):
    for _ in range(100):
        got = (await request(nc, subjects.query("claim.get"), {"claim_id": slot_id}))["data"]
        if got["status"] in ("allocated", "bound"):
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(got)


async def test_requests_reuse_a_warm_slot_until_its_concurrency_is_full(stack):
    nc, _, clock = stack
    first = await ask(nc, "acquire", model="chat-8b")
    assert first["warm"] is False and first["gpus"] == 1 and first["memory_per_gpu_gib"] == 30.0
    second = await ask(nc, "acquire", model="chat-8b")
    assert second["warm"] is True and second["slot_id"] == first["slot_id"] and second["active"] == 2
    third = await ask(nc, "acquire", model="chat-8b")  # full: a second slot
    assert third["warm"] is False and third["slot_id"] != first["slot_id"]
    adapter = await ask(nc, "acquire", model="chat-8b", lora="adapters/sql")
    assert adapter["slot_id"] not in (first["slot_id"], third["slot_id"]) and adapter["lora"] == "adapters/sql"
    await ask(nc, "finish", slot_id=first["slot_id"])
    again = await ask(nc, "acquire", model="chat-8b")
    assert again["slot_id"] in (first["slot_id"], third["slot_id"]) and again["warm"] is True
    claim = await allocated(nc, first["slot_id"])
    assert claim["devices"][0]["milli"] < 1000  # 30 GiB of an 80 GiB card: the rest is shared


async def test_a_big_model_gets_any_gpu_count_with_memory_split_evenly(stack):
    nc, _, _ = stack
    slot = await ask(nc, "acquire", model="big")  # 160 GiB, 48 heads: 2 x 80 is too much for 95% of a card, 3 x 53.3 fits
    assert (slot["gpus"], slot["memory_per_gpu_gib"]) == (3, 53.333)
    claim = await allocated(nc, slot["slot_id"])
    assert len(claim["devices"]) == 3


async def test_an_ollama_slot_takes_its_memory_from_the_model_file(stack):
    nc, slots, _ = stack
    slot = await ask(nc, "acquire", model="tiny")
    assert slot["runtime"] == "ollama" and 0.4 < slot["memory_per_gpu_gib"] < 1.0  # mostly CUDA overhead
    assert slots.models["tiny"].max_concurrency == 4


async def test_a_model_no_node_can_host_is_never_satisfiable_and_unknown_ones_are_named(stack):
    nc, _, _ = stack
    huge = await request(nc, subjects.command("slot.acquire"), {"model": "huge"})
    assert huge["error"]["code"] == "never-satisfiable"
    unknown = await request(nc, subjects.command("slot.acquire"), {"model": "gpt-9"})
    assert unknown["error"]["field"] == "model" and "chat-8b" in unknown["error"]["message"]


async def test_stale_slots_are_released_on_the_timer_and_idle_ones_on_demand(stack):
    nc, slots, clock = stack
    old = await ask(nc, "acquire", model="chat-8b")
    busy = await ask(nc, "acquire", model="tiny")
    await ask(nc, "finish", slot_id=old["slot_id"])
    clock.now += 61
    assert await slots.reap(60.0) == [old["slot_id"]]  # what the timer does; the busy slot stays
    listed = {s["slot_id"] for s in await ask(nc, "list")}
    assert listed == {busy["slot_id"]}
    # on demand: two 3-GPU slots, idle but not stale, leave no room for a third (another adapter,
    # so no warm slot matches), which waits: the longest idle one is released for it
    fill = [await ask(nc, "acquire", model="big") for _ in range(2)]
    for s in fill:
        await allocated(nc, s["slot_id"])
        await ask(nc, "finish", slot_id=s["slot_id"])
    waiting = await ask(nc, "acquire", model="big", lora="adapters/legal")
    assert waiting["warm"] is False
    for _ in range(100):  # until the allocator has said why it waits
        got = (await request(nc, subjects.query("claim.get"), {"claim_id": waiting["slot_id"]}))["data"]
        if got.get("reasons"):
            break
        await asyncio.sleep(0.05)
    assert got["status"] == "pending" and got["verdict"] == "waiting", got
    released = (await ask(nc, "cleanup", stale_after_s=3600))["released"]
    assert len(released) == 1 and released[0] in {s["slot_id"] for s in fill}
    assert (await allocated(nc, waiting["slot_id"]))["status"] in ("allocated", "bound")
