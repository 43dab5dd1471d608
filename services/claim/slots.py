"""Model slots in the claim service (Helix seed 002): requests to warm slots, new slots as claims,
stale slots released on a timer and on demand.

A slot's GPUs are an ordinary claim (workload `helix-slot`, labels naming model, runtime, adapter
and concurrency; `gpus` = the slot's GPU count, `gpu_memory_gib` = its even share per GPU), so the
allocator places it and quota counts it. The requests running on each slot are events too
(`SlotRequestStarted` / `SlotRequestFinished`, fenced per slot: `slot_book`), so every replica of
the claim service counts the same requests and a restarted one still sees them; a request not
finished within GPULEDGER_SLOT_REQUEST_TIMEOUT_S gives its concurrency back (a client that died).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from schemas import events as ev
from schemas import subjects
from schemas.commands import AcquireSlot, CleanupSlots, FinishSlotRequest, ListSlots, Reply, fail, ok
from schemas.reasons import never_satisfiable_here
from schemas.types import ClaimSpec
from ledger.state import State
from services.claim.availability import availability
from services.claim.heard import SLOT_SIGNS, HeardHere
from services.claim.slot_book import SlotBook
from services.claim.slot_core import Slot, SlotKey, plan_slot, stale_slots, warm_slot
from services.claim.slot_models import load_models
from services.claim.validation import SLOT_WORKLOAD
from shared.commands import DomainError, command
from shared.eventlog import AppendConflict
from shared.service import ServiceContext

log = logging.getLogger("gpuledger.slots")
WORKLOAD = SLOT_WORKLOAD  # reserved: only this service submits such claims
LIVE = ("pending", "allocated", "bound")
QUEUE = "claim-slots"
FENCE_TRIES = 8  # appends lost to another replica's, then the request is refused as busy


class Slots:
    def __init__(self, claims, models: dict, stale_after_s: float, clock=time.time,
                 request_timeout_s: float = 900.0):
        self.claims = claims  # the claim service: submits and releases the slots' claims
        self.models = models
        self.stale_after_s = stale_after_s
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.slots: dict[str, Slot] = {}
        self.book = SlotBook()
        claims.follower.listeners.append(self.book.on_event)
        # a slot's idleness and its requests' age are judged by when this service heard them, on
        # its own clock (heard.py): never the allocator's, an agent's or another replica's time
        self.heard = HeardHere(lambda: self.clock(), lambda: self.claims.follower.state, _is_slot,
                               SLOT_SIGNS)
        claims.follower.after_live.append(self.heard.hear)
        self._lock = asyncio.Lock()

    @property
    def state(self) -> State:
        return self.claims.state

    def _sync(self) -> None:
        """Slots from the fold: one per helix-slot claim; ended when its claim ended. A slot's
        `last_activity` is when this service last heard of it (its submit, its requests' starts
        and finishes), on its own clock (heard.py)."""
        if self.claims.follower.caught_up.is_set():  # what it caught up on counts from now
            self.heard.begin()
        for claim_id, claim in self.state.claims.items():
            if claim.spec.workload != WORKLOAD:
                continue
            slot = self.slots.get(claim_id)
            if slot is None and claim.status in LIVE:
                labels = claim.spec.labels
                slot = self.slots[claim_id] = Slot(
                    claim_id, SlotKey(labels.get("model", ""), labels.get("runtime", ""), labels.get("lora", "")),
                    max(claim.spec.gpus, 1), claim.spec.gpu_memory_gib, int(labels.get("concurrency", "1")),
                    self.heard.last(claim_id))
            if slot is None:
                continue
            slot.ended = claim.status not in LIVE
            if slot.ended:
                self.book.forget(claim_id)
            slot.active = self.book.active(claim_id)
            slot.last_activity = max(slot.last_activity, self.heard.last(claim_id))

    def _live(self) -> list[Slot]:
        return [s for s in self.slots.values() if not s.ended]

    async def acquire(self, c: AcquireSlot) -> Reply:
        model = self.models.get(c.model)
        if model is None:
            return fail("not-found", f"unknown model {c.model!r}; known: {', '.join(self.models) or 'none'} "
                        "(GPULEDGER_MODELS)", "model")
        request_id = c.request_id or uuid.uuid4().hex
        async with self._lock:
            for _ in range(FENCE_TRIES):
                await self._catch_up()
                key = SlotKey(model.name, model.runtime, c.lora)
                slot = warm_slot(self._live(), key)
                warm = slot is not None
                if slot is None:
                    slot = await self._new_slot(model, key, c.namespace)
                    if isinstance(slot, Reply):
                        return slot
                started = ev.SlotRequestStarted(slot_id=slot.slot_id, request_id=request_id, at=self.clock())
                if await self._append_fenced(slot.slot_id, started, f"slot-start-{request_id}"):
                    self._sync()
                    return ok(self._describe(slot) | {"warm": warm, "request_id": request_id})
        return fail("unavailable", f"model {c.model}: other replicas kept taking the slots first; try again")

    async def _catch_up(self) -> None:
        await self.claims.follower.wait_for_seq(await self.claims.log.last_seq())
        self._sync()

    async def _append_fenced(self, slot_id: str, event, msg_id: str) -> bool:
        """Append against the slot's fence; False when another replica wrote to the slot first (the
        caller catches up and chooses again). A retried append already stored counts as done."""
        try:
            appended = await self.claims.log.append(subjects.slot(slot_id), event, msg_id=msg_id,
                                                    expected_last_subject_seq=self.book.fence.get(slot_id, 0))
        except AppendConflict:
            return False
        await self.claims.follower.wait_for_seq(appended.seq)
        return True

    async def _new_slot(self, model, key: SlotKey, namespace: str) -> Slot | Reply:
        fleet = {name: (card_gib, row["max_per_node"]) for name, row in availability(self.state).items()
                 if row["max_per_node"] and (card_gib := self._card_gib(name))}
        plan = plan_slot(model, fleet)
        if plan is None:
            return fail("never-satisfiable", f"no node of the fleet can host {model.name} ({model.memory_gib:g} GiB, "
                        f"{model.runtime}) on any GPU count it allows", "model")
        number = sum(1 for s in self.slots.values() if s.key.model == model.name) + 1
        while f"slot-{model.name}-{number}" in self.state.claims:  # an id a publisher took
            number += 1
        slot_id = f"slot-{model.name}-{number}"
        labels = {"model": model.name, "runtime": model.runtime, "concurrency": str(model.max_concurrency),
                  **({"lora": key.lora} if key.lora else {})}
        spec = ClaimSpec(claim_id=slot_id, namespace=namespace, gpus=plan.gpus,
                         gpu_memory_gib=plan.memory_per_gpu_gib, models=list(plan.models), workload=WORKLOAD,
                         labels=labels)
        try:
            await self.claims.submit(spec, internal=True)
        except DomainError as err:
            return fail(err.code, err.message, err.field)
        slot = self.slots[slot_id] = Slot(slot_id, key, plan.gpus, plan.memory_per_gpu_gib,
                                          model.max_concurrency, self.clock())
        return slot

    def _card_gib(self, model: str) -> float:
        memory = [u.memory_mib for u in self.state.units.values() if u.model == model and u.mig_index < 0]
        return max(memory) / 1024 if memory else 0.0

    async def finish(self, c: FinishSlotRequest) -> Reply:
        async with self._lock:
            for _ in range(FENCE_TRIES):
                await self._catch_up()
                slot = self.slots.get(c.slot_id)
                if slot is None:
                    return fail("not-found", f"no slot {c.slot_id!r}", "slot_id")
                request_id = c.request_id or self.book.oldest(c.slot_id)
                if request_id is None or request_id not in self.book.running.get(c.slot_id, {}):
                    why = f"request {c.request_id!r} is not running on it" if c.request_id else "no request is running on it"
                    return fail("not-found", f"slot {c.slot_id}: {why}", "request_id")
                done = ev.SlotRequestFinished(slot_id=c.slot_id, request_id=request_id, at=self.clock())
                if await self._append_fenced(c.slot_id, done, f"slot-finish-{request_id}"):
                    self._sync()
                    return ok(self._describe(slot) | {"request_id": request_id})
        return fail("unavailable", f"slot {c.slot_id}: other replicas kept writing to it first; try again")

    async def list(self, c: ListSlots) -> Reply:
        self._sync()
        return ok([self._describe(s) for s in self._live() if not c.model or s.key.model == c.model])

    async def cleanup(self, c: CleanupSlots) -> Reply:
        released = await self.reap(c.stale_after_s if c.stale_after_s > 0 else self.stale_after_s)
        return ok({"released": released})

    async def reap(self, stale_after_s: float) -> list[str]:
        """Release every stale slot (the timer), and, while a new slot's claim waits for room that
        waiting can free, the longest-idle slot at all (on demand, Helix's eviction of stale slots)."""
        async with self._lock:
            self._sync()
            now = self.clock()
            await self._time_out_requests(now)
            self.heard.prune()
            doomed = stale_slots(self._live(), now, stale_after_s)
            if self._a_slot_waits_for_room():
                doomed += [s for s in stale_slots(self._live(), now, 0.0) if s not in doomed][:1]
            for slot in doomed:
                await self.claims.release(slot.slot_id, f"stale slot: idle since {slot.last_activity:.0f}")
                slot.ended = True
        return [s.slot_id for s in doomed]

    async def _time_out_requests(self, now: float) -> None:
        """Requests running past the timeout give their concurrency back (their client died)."""
        if self.request_timeout_s <= 0:
            return
        for slot_id, request_id in self.book.overdue(now, self.request_timeout_s, self.heard.started):
            late = ev.SlotRequestFinished(slot_id=slot_id, request_id=request_id, reason="timeout", at=now)
            if await self._append_fenced(slot_id, late, f"slot-finish-{request_id}"):
                log.info("slot %s: request %s timed out after %.0f s", slot_id, request_id, self.request_timeout_s)
        self._sync()

    def _a_slot_waits_for_room(self) -> bool:
        for slot in self._live():
            claim = self.state.claims.get(slot.slot_id)
            if claim is not None and claim.status == "pending" and claim.reasons and \
                    not never_satisfiable_here([r.code for r in claim.reasons]):
                return True
        return False

    def _describe(self, slot: Slot) -> dict:
        claim = self.state.claims.get(slot.slot_id)
        view = {"slot_id": slot.slot_id, "model": slot.key.model, "runtime": slot.key.runtime,
                "lora": slot.key.lora, "gpus": slot.gpus, "memory_per_gpu_gib": slot.memory_per_gpu_gib,
                "active": slot.active, "max_concurrency": slot.max_concurrency,
                "last_activity": slot.last_activity, "status": claim.status if claim else "pending"}
        if claim is not None and claim.node:
            view["node"] = claim.node
        return view

    async def run_reaper(self, tick_s: float) -> None:
        while True:
            await asyncio.sleep(tick_s)
            try:
                released = await self.reap(self.stale_after_s)
                if released:
                    log.info("released stale slots %s", ", ".join(released))
            except Exception:  # an infrastructure hiccup: log it, try again next tick
                log.exception("slot clean-up failed")


def _is_slot(spec: ClaimSpec) -> bool:
    return spec.workload == WORKLOAD


async def register_slots(ctx: ServiceContext) -> Slots:
    """Add the slot handlers and the clean-up timer to a claim service being built."""
    slots = Slots(ctx.claims, load_models(ctx.settings.models_file), ctx.settings.slot_stale_s,  # type: ignore[attr-defined]
                  request_timeout_s=ctx.settings.slot_request_timeout_s)
    ctx.slots = slots  # type: ignore[attr-defined]  # for in-process tests
    b = ctx.broker
    command(b, subjects.command("slot.acquire"), AcquireSlot, slots.acquire, queue=QUEUE)
    command(b, subjects.command("slot.finish"), FinishSlotRequest, slots.finish, queue=QUEUE)
    command(b, subjects.command("slot.cleanup"), CleanupSlots, slots.cleanup, queue=QUEUE)
    command(b, subjects.query("slot.list"), ListSlots, slots.list, queue=QUEUE)
    if ctx.settings.slot_tick_s > 0:
        ctx.spawn(slots.run_reaper(ctx.settings.slot_tick_s), "slot-reaper")
    return slots
