"""The node agent: registers its node, heartbeats, watches health and usage, and binds allocations.

One `NodeAgent` per node; the simulated fleet runs several in one process, each with its own
FakeNvml. All NVML reading goes through the injected module, all writing through the event log.

Resuming after a restart (docs/node-agent.md): decisions are read through a durable JetStream
consumer per node (`node-agent-<node>`), acknowledged only after the ClaimBound is appended, so a
restarted agent carries on where it stopped and sees every allocation made while it was down.
A decision that may have been handled before (a redelivery, or stored before this start) is
checked against the claim's own subject first, so a claim is never bound twice, even after
the 2-minute dedup window of `Nats-Msg-Id: bound-<claim>` has passed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import NotFoundError

from schemas import subjects
from schemas.events import (
    AllocationExpired, AllocationUnused, ClaimAllocated, ClaimBound, ClaimEvicted, ClaimReleased, DecisionBatch,
    DeviceHealthChanged, DriftDetected, NodeConditionChanged, NodeHeartbeat, NodeLost,
    UsageObserved, decode_event)
from services.node_agent.binding import bind_env
from services.node_agent.discovery import Inventory, discover
from services.node_agent.health import (
    FAULTED, APPLICATION_XIDS, Verdict, XidWatcher, device_verdicts, link_regressions,
    node_condition, probe_card)
from services.node_agent.islands import active_links
from services.node_agent.reconcile import ProcessReaper, kill_host_process
from services.node_agent.usage import observe_usage, usage_signature

log = logging.getLogger("gpuledger.node_agent")


@dataclass
class AgentConfig:
    node: str
    labels: dict[str, str] = field(default_factory=dict)
    cpu_milli: int = 0
    memory_mib: int = 0
    simulated: bool = False
    heartbeat_s: float = 5.0
    watch_s: float = 3.0  # health and usage pass
    usage_every_s: float = 60.0  # a UsageObserved at least this often, changed or not
    rescan_s: float = 60.0  # full rediscovery: MIG re-layout, a card gone or back
    xid_hold_s: float = 300.0  # a critical XID keeps its card Faulted this long after the last
    xid_ignore: frozenset[int] = APPLICATION_XIDS
    fault_drains_node: bool = True  # HasFaulted while a device is Faulted (seed 004)
    fetch_timeout_s: float = 2.0  # how long one pull for decisions waits before pulling again
    kill_unallocated_after_s: float = 0.0  # > 0: kill processes no allocation holds (reconcile.py)


async def subject_events(js: Any, subject: str):
    """Every event on one subject, oldest first, by direct 'next message on subject' lookups: a
    few requests for a claim's handful of events, and it ends at the last one by construction
    (a consumer-based read has to guess when it has seen everything)."""
    seq = 1
    while True:
        try:
            raw = await js.get_msg(subjects.STREAM, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return
        yield decode_event(raw.data)
        seq = raw.seq + 1


async def _unsubscribe(sub: Any) -> None:
    """Unsubscribe rather than leave it to the connection's drain, which waits forever on a pull
    subscription whose last fetch timed out (nats-py keeps an unfinished item in its queue)."""
    try:
        await sub.unsubscribe()
    except Exception:  # the connection is already closing: the subscription goes with it
        pass


def durable_name(node: str) -> str:
    """JetStream consumer names may not hold '.', '*', '>' or spaces."""
    return "node-agent-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in node)


class NodeAgent:
    def __init__(self, nvml: Any, config: AgentConfig, event_log: Any, nc: Any,
                 clock: Callable[[], float] = time.time, offload: bool = False):
        self.nvml, self.config, self.log, self.nc = nvml, config, event_log, nc
        self.clock = clock
        self.offload = offload  # real NVML blocks: run it in a thread; the fake need not
        self.inventory: Inventory | None = None
        self.verdicts: dict[str, Verdict] = {}
        self.condition: tuple[str, str] | None = None
        self.infra: list[str] = []  # node-level problems of the last health pass (NVLink lost)
        self.xid_until: dict[str, tuple[float, int]] = {}
        self.xids: XidWatcher | None = None
        self.usage_sig: tuple | None = None
        self.usage_at = float("-inf")
        self.rescanned_at = 0.0
        self.bound: set[str] = set()
        self.bindings: dict[str, list[str]] = {}  # claim -> granted UUIDs (for simulated workloads)
        self.on_bound: list[Callable[[ClaimAllocated], None]] = []
        self.on_ended: list[Callable[[str], None]] = []
        self.wake = asyncio.Event()
        self.last_usages: list = []
        self.reaper: ProcessReaper | None = None

    @property
    def node(self) -> str:
        return self.config.node

    async def _nvml(self, fn: Callable, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args) if self.offload else fn(*args)

    # --- registration ---------------------------------------------------------------------

    async def register(self) -> None:
        """Discover and append NodeRegistered (a re-registration replaces the inventory)."""
        inventory = await self._nvml(discover, self.nvml, self.node)
        await self._adopt(inventory)
        for line in inventory.notes.lines():
            log.info("%s: %s", self.node, line)

    async def _adopt(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.rescanned_at = self.clock()
        cards = {f.info.uuid: f.handle for f in inventory.cards() if f.handle is not None}
        if self.xids is not None:
            self.xids.close()
        self.xids = await self._nvml(XidWatcher, self.nvml, cards, inventory.notes,
                                     self.config.xid_ignore)
        self.verdicts = device_verdicts(inventory.devices, {})
        c = self.config
        await self.log.append(subjects.node(self.node), inventory.registered(
            self.clock(), c.labels, c.cpu_milli, c.memory_mib, c.simulated))
        await self._publish_condition(force=True)

    # --- loops ----------------------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        while True:
            await self.log.append(subjects.node(self.node), NodeHeartbeat(at=self.clock(), node=self.node))
            await asyncio.sleep(self.config.heartbeat_s)

    async def watch_loop(self) -> None:
        while True:
            await self.watch_once()
            try:
                await asyncio.wait_for(self.wake.wait(), self.config.watch_s)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    async def watch_once(self) -> None:
        """One pass: rediscover when due, then health, then usage."""
        if self.clock() - self.rescanned_at >= self.config.rescan_s:
            await self._rescan()
        await self._watch_health()
        await self._watch_usage()
        await self._reap()

    async def _rescan(self) -> None:
        fresh = await self._nvml(discover, self.nvml, self.node)
        self.rescanned_at = self.clock()
        if self.inventory is None or fresh.layout() != self.inventory.layout():
            log.info("%s: inventory changed, registering again", self.node)
            await self._adopt(fresh)

    async def _watch_health(self) -> None:
        now = self.clock()
        for uuid, xid in await self._nvml(self.xids.poll) if self.xids else []:
            self.xid_until[uuid] = (now + self.config.xid_hold_s, xid)
        cards = await self._nvml(self._probe_cards, now)
        self.infra = await self._nvml(self._probe_links)
        current = device_verdicts(self.inventory.devices, cards)
        for uuid, verdict in current.items():
            if self.verdicts.get(uuid, Verdict()).health != verdict.health:
                await self.log.append(subjects.node(self.node), DeviceHealthChanged(
                    at=now, node=self.node, uuid=uuid, health=verdict.health, reason=verdict.reason))
        self.verdicts = current
        await self._publish_condition()

    def _probe_cards(self, now: float) -> dict[str, Verdict]:
        verdicts = {}
        for found in self.inventory.cards():
            if found.handle is None:
                continue  # unreachable at discovery: stays Faulted until a rescan finds it
            verdict = probe_card(self.nvml, found.handle, f"GPU {found.info.index}", self.inventory.notes)
            until, xid = self.xid_until.get(found.info.uuid, (0.0, 0))
            if verdict.healthy and now < until:
                verdict = Verdict(FAULTED, f"critical XID {xid}")
            verdicts[found.info.uuid] = verdict
        return verdicts

    def _probe_links(self) -> list[str]:
        linked = [(f.info.index, f.handle) for f in self.inventory.cards()
                  if f.handle is not None and f.info.index in self.inventory.nvlinks]
        return link_regressions(self.inventory.nvlinks, active_links(self.nvml, linked, self.inventory.notes))

    async def _publish_condition(self, force: bool = False) -> None:
        condition = node_condition(self.verdicts, self.infra, self.config.fault_drains_node)
        if force or condition != self.condition:
            self.condition = condition
            await self.log.append(subjects.node(self.node), NodeConditionChanged(
                at=self.clock(), node=self.node, condition=condition[0], reason=condition[1]))

    async def _watch_usage(self) -> None:
        usages = self.last_usages = await self._nvml(observe_usage, self.nvml, self.inventory,
                                                      self.inventory.notes)
        signature, now = usage_signature(usages), self.clock()
        if signature == self.usage_sig and now - self.usage_at < self.config.usage_every_s:
            return
        self.usage_sig, self.usage_at = signature, now
        await self.log.append(subjects.node(self.node), UsageObserved(at=now, node=self.node, devices=usages))

    async def _reap(self) -> None:
        """The operator's choice: kill processes no allocation holds, past the grace (reconcile.py)."""
        if self.config.kill_unallocated_after_s <= 0:
            return
        if self.reaper is None:
            kill = getattr(self.nvml, "kill_process", None) or kill_host_process
            self.reaper = ProcessReaper(self.node, self.config.kill_unallocated_after_s, kill,
                                        self.nc.jetstream(), self.log, self.clock)
        if await self.reaper.reap(self.last_usages):
            self.wake.set()  # report the usage without the killed processes on the next pass

    # --- binding --------------------------------------------------------------------------

    async def bind_loop(self) -> None:
        """Follow the decision subject through this node's durable consumer; ack after handling."""
        js = self.nc.jetstream()
        boot_seq = await self.log.last_seq()
        config = api.ConsumerConfig(durable_name=durable_name(self.node),
                                    deliver_policy=api.DeliverPolicy.ALL,
                                    ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0,
                                    filter_subject=subjects.DECISIONS, max_ack_pending=1024)
        sub = await js.pull_subscribe(subjects.DECISIONS, durable=durable_name(self.node),
                                      stream=subjects.STREAM, config=config)
        try:
            while True:
                try:
                    messages = await sub.fetch(batch=256, timeout=self.config.fetch_timeout_s)
                except (NatsTimeout, asyncio.TimeoutError):  # nats-py raises either, by version
                    continue
                for msg in messages:
                    seq, deliveries = msg.metadata.sequence.stream, msg.metadata.num_delivered
                    await self.handle_decision(msg.data, maybe_seen=deliveries > 1 or seq <= boot_seq)
                    await msg.ack()
        finally:
            await _unsubscribe(sub)

    async def handle_decision(self, data: bytes, maybe_seen: bool = False) -> None:
        try:
            batch = decode_event(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            log.warning("%s: skipping an undecodable decision message: %s", self.node, err)
            return
        if not isinstance(batch, DecisionBatch):
            return
        for decision in batch.decisions:
            if isinstance(decision, ClaimAllocated) and decision.node == self.node:
                await self._bind(decision, maybe_seen)
            else:
                self._note_ended(decision)

    async def _bind(self, allocation: ClaimAllocated, maybe_seen: bool) -> None:
        claim_id = allocation.claim_id
        if claim_id in self.bound or (maybe_seen and await self._settled(claim_id)):
            self.bound.add(claim_id)
            return
        binding = bind_env(allocation, {f.info.uuid: f.info for f in self.inventory.devices})
        if not binding.ok:
            await self._report_missing(allocation, binding.missing)
            return
        await self.log.append(subjects.claim(claim_id),
                              ClaimBound(at=self.clock(), claim_id=claim_id, node=self.node, env=binding.env),
                              msg_id=f"bound-{claim_id}")
        self.bound.add(claim_id)
        self.bindings[claim_id] = [g.uuid for g in allocation.grants]
        for hook in self.on_bound:
            hook(allocation)

    async def _settled(self, claim_id: str) -> bool:
        """Already bound, or released before we got to it: either way nothing to bind."""
        async for event in subject_events(self.nc.jetstream(), subjects.claim(claim_id)):
            if isinstance(event, (ClaimBound, ClaimReleased)):
                return True
        return False

    async def _report_missing(self, allocation: ClaimAllocated, missing: tuple[str, ...]) -> None:
        log.warning("%s: claim %s was granted devices this node lacks: %s", self.node,
                    allocation.claim_id, ", ".join(missing))
        for uuid in missing:
            await self.log.append(subjects.drift(self.node), DriftDetected(
                at=self.clock(), node=self.node, kind="missing-device", uuid=uuid,
                claim_id=allocation.claim_id, detail="granted device not on this node; not bound"),
                msg_id=f"unbound-{allocation.claim_id}-{uuid}")

    def _note_ended(self, decision: Any) -> None:
        if isinstance(decision, (ClaimEvicted, AllocationExpired, AllocationUnused)):
            self.claim_ended(decision.claim_id)
        elif isinstance(decision, NodeLost) and decision.node == self.node:
            for claim_id in decision.released:
                self.claim_ended(claim_id)

    def claim_ended(self, claim_id: str) -> None:
        """The claim no longer holds its devices (released, evicted, expired, node lost)."""
        if self.bindings.pop(claim_id, None) is not None:
            for hook in self.on_ended:
                hook(claim_id)
