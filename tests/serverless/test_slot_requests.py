"""Requests on model slots are events (SlotRequestStarted/Finished, fenced per slot): two claim
service replicas never overfill a slot, a restarted service still sees the requests running, a
request whose client died times out, and a retried acquire with the same request id counts once."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.commands import AcquireSlot
from shared.jetstream import JetStreamEventLog
from tests.serverless.test_slot_service import Clock, ask, models_file  # noqa: F401  (fixture)
from tests.service.helpers import h100_node, register_nodes, request, running

SETTINGS = dict(endpoint_tick_s=0, slot_tick_s=0, slot_stale_s=60.0, slot_request_timeout_s=120.0)


@pytest.fixture
async def nc(fresh_nats):
    conn = await nats.connect(fresh_nats.url)
    yield conn
    await conn.close()


async def with_node(nc) -> None:
    """One 8 x H100 node, registered once the services made the stream."""
    log = JetStreamEventLog(nc)
    if not [s async for s in log.read(subject=subjects.node("node-a"))]:
        await register_nodes(log, h100_node("node-a"))


async def slot_events(nc) -> list[ev.Event]:
    log = JetStreamEventLog(nc)
    return [stored.event async for stored in log.read(subject="gpu.evt.slot.>")]


async def test_two_replicas_never_give_a_slot_more_requests_than_it_takes(fresh_nats, nc, models_file):
    async with running(fresh_nats.url, "claim", "claim", "allocator", models_file=str(models_file),
                       **SETTINGS) as contexts:
        await with_node(nc)
        a, b = contexts[0].slots, contexts[1].slots
        replies = [await ask(nc, "acquire", model="chat-8b")]  # one slot, one of its two taken
        for _ in range(3):  # both replicas see the same free place and race for it
            replies += [r.data for r in await asyncio.gather(a.acquire(AcquireSlot(model="chat-8b")),
                                                             b.acquire(AcquireSlot(model="chat-8b")))]
        await asyncio.gather(*[svc.follower.wait_for_seq(await svc.log.last_seq()) for svc in (a.claims, b.claims)])
        per_slot: dict[str, int] = {}
        for reply in replies:
            per_slot[reply["slot_id"]] = per_slot.get(reply["slot_id"], 0) + 1
        assert all(n <= 2 for n in per_slot.values()), per_slot  # chat-8b takes 2 at once
        assert sum(per_slot.values()) == 7 and len({r["request_id"] for r in replies}) == 7
        for slots in (a, b):  # both replicas count the same requests
            slots._sync()
            assert {s: slots.book.active(s) for s in per_slot} == per_slot


async def test_a_restarted_service_still_sees_the_requests_running(fresh_nats, nc, models_file):
    async with running(fresh_nats.url, "claim", "allocator", models_file=str(models_file), **SETTINGS):
        await with_node(nc)
        first = await ask(nc, "acquire", model="chat-8b")
        second = await ask(nc, "acquire", model="chat-8b")
        assert second["slot_id"] == first["slot_id"] and second["active"] == 2
    async with running(fresh_nats.url, "claim", "allocator", models_file=str(models_file), **SETTINGS):
        listed = {s["slot_id"]: s for s in await ask(nc, "list")}
        assert listed[first["slot_id"]]["active"] == 2
        third = await ask(nc, "acquire", model="chat-8b")  # the slot is still full
        assert third["slot_id"] != first["slot_id"] and third["warm"] is False
        done = await ask(nc, "finish", slot_id=first["slot_id"], request_id=second["request_id"])
        assert done["active"] == 1 and done["request_id"] == second["request_id"]


async def test_a_request_whose_client_died_times_out_and_frees_its_concurrency(fresh_nats, nc, models_file):
    async with running(fresh_nats.url, "claim", "allocator", models_file=str(models_file), **SETTINGS) as contexts:
        await with_node(nc)
        slots = contexts[0].slots
        clock = slots.clock = Clock()
        lost = await ask(nc, "acquire", model="chat-8b")
        clock.now += 30
        await ask(nc, "acquire", model="chat-8b")
        clock.now += 100  # the first is 130 s old (timeout 120), the second 100 s
        assert await slots.reap(3600.0) == []  # no slot is stale: both still have a request
        finished = [e for e in await slot_events(nc) if isinstance(e, ev.SlotRequestFinished)]
        assert [(e.request_id, e.reason) for e in finished] == [(lost["request_id"], "timeout")]
        listed = {s["slot_id"]: s for s in await ask(nc, "list")}
        assert listed[lost["slot_id"]]["active"] == 1


async def test_a_retried_acquire_counts_once_and_unknown_requests_are_named(fresh_nats, nc, models_file):
    async with running(fresh_nats.url, "claim", "allocator", models_file=str(models_file), **SETTINGS):
        await with_node(nc)
        one = await ask(nc, "acquire", model="chat-8b", request_id="req-1")
        again = await ask(nc, "acquire", model="chat-8b", request_id="req-1")
        assert again["request_id"] == "req-1" and again["active"] == 1 == one["active"]
        started = [e for e in await slot_events(nc) if isinstance(e, ev.SlotRequestStarted)]
        assert [e.request_id for e in started] == ["req-1"]
        wrong = await request(nc, subjects.command("slot.finish"), {"slot_id": one["slot_id"], "request_id": "nope"})
        assert wrong["error"]["code"] == "not-found" and wrong["error"]["field"] == "request_id"
        assert "'nope' is not running" in wrong["error"]["message"]
        bad = await request(nc, subjects.command("slot.acquire"), {"model": "chat-8b", "request_id": "a.b"})
        assert bad["error"]["code"] == "invalid" and bad["error"]["field"] == "request_id"
        await ask(nc, "finish", slot_id=one["slot_id"])
        idle = await request(nc, subjects.command("slot.finish"), {"slot_id": one["slot_id"]})
        assert idle["error"]["code"] == "not-found" and "no request is running on it" in idle["error"]["message"]


async def test_the_cli_acquires_lists_and_finishes_a_request(fresh_nats, nc, models_file):
    from tests.cli import run_cli

    async with running(fresh_nats.url, "claim", "allocator", models_file=str(models_file), **SETTINGS):
        await with_node(nc)
        url = ["--nats-url", fresh_nats.url]
        got = await run_cli("slot", "acquire", "chat-8b", "--request-id", "cli-1", *url)
        assert got.returncode == 0 and "request cli-1 on new slot slot-chat-8b-1: chat-8b (vllm)" in got.stdout, got
        listed = await run_cli("slot", "list", *url)
        assert "1/2 requests" in listed.stdout, listed
        done = await run_cli("slot", "finish", "slot-chat-8b-1", *url)
        assert done.returncode == 0 and "request cli-1 finished" in done.stdout and "0/2" in done.stdout, done
        again = await run_cli("slot", "finish", "slot-chat-8b-1", *url)
        assert again.returncode == 1 and "no request is running on it" in again.stderr, again
        unknown = await run_cli("slot", "acquire", "gpt-9", *url)
        assert unknown.returncode == 1 and "unknown model 'gpt-9'" in unknown.stderr, unknown
