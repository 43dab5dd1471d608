"""The node agent: registers its node, heartbeats, watches health and usage, and binds allocations.

One `NodeAgent` per node; the simulated fleet runs several in one process, each with its own
FakeNvml. All NVML reading goes through the injected module, all writing through the event log.

Binding (services/node_agent/binder.py): the agent acts on its node's record of live claims, the
allocator's fold of the log (schemas.grants), and on nothing else: it binds what the record lists,
and stops the workloads of what it no longer lists. It reads no decision of any other node.
A transient NATS error in a heartbeat, a report or a binding is retried with a backoff, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.inventory import refusal
from schemas import subjects
from schemas.events import DeviceHealthChanged, NodeConditionChanged, NodeHeartbeat, UsageObserved
from schemas.grants import LiveClaim
from services.node_agent.binder import Binder
from services.node_agent.discovery import Inventory, discover
from services.node_agent.health import (
    FAULTED, APPLICATION_XIDS, Verdict, XidWatcher, device_verdicts, link_regressions,
    node_condition, probe_card)
from services.node_agent.islands import active_links
from services.node_agent.reconcile import ProcessReaper, kill_host_process
from services.node_agent.retry import TRANSIENT, Backoff, every
from services.node_agent.usage import observe_usage, usage_signature

log = logging.getLogger("gpuledger.node_agent")


class InventoryRefused(RuntimeError):
    """The inventory this agent would register is one every fold drops (ledger/inventory.py)."""
LOOKS = frozenset(("rescan", "health", "usage"))  # what a watch pass may look at


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
    kill_unallocated_after_s: float = 0.0  # > 0: kill processes no allocation holds (reconcile.py)


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
        # a simulated node's: what of its fake NVML changed since asked last ("health", "usage");
        # None on real NVML, which cannot tell, so every pass looks at everything
        self.changes: Callable[[], set[str]] | None = None
        self._due: set[str] = set()  # looks a failed pass still owes
        self.binder = Binder(config.node, event_log, self.devices, clock)
        self.wake = asyncio.Event()
        self._leftover_tasks: set[asyncio.Task] = set()
        self.last_usages: list = []
        self.reaper: ProcessReaper | None = None

    @property
    def on_bound(self) -> list[Callable[[LiveClaim], None]]:
        """Called with each claim once its binding is stored (or found stored after a restart)."""
        return self.binder.on_bound

    @property
    def on_ended(self) -> list[Callable[[LiveClaim], None]]:
        """Called with each bound claim that its node's record no longer lists."""
        return self.binder.on_ended

    def devices(self) -> dict:
        """The node's devices by UUID, as last discovered."""
        return {f.info.uuid: f.info for f in self.inventory.devices} if self.inventory else {}

    @property
    def node(self) -> str:
        return self.config.node

    async def _nvml(self, fn: Callable, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args) if self.offload else fn(*args)

    # --- registration ---------------------------------------------------------------------

    async def register(self) -> None:
        """Discover and append NodeRegistered (a re-registration replaces the inventory); NATS
        trouble is waited out."""
        inventory = await self._nvml(discover, self.nvml, self.node)
        backoff = Backoff()
        while True:
            try:
                await self._adopt(inventory)
                break
            except TRANSIENT as err:
                delay = backoff.next()
                log.warning("%s: registering failed (%s); again in %.1f s", self.node, err, delay)
                await asyncio.sleep(delay)
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
        event = inventory.registered(self.clock(), c.labels, c.cpu_milli, c.memory_mib, c.simulated)
        why = refusal({}, event)
        if why:  # every fold would drop it (ledger/inventory.py): say so here, where it can be fixed
            raise InventoryRefused(f"{self.node}: every service would refuse this node's inventory: {why}")
        await self.log.append(subjects.node(self.node), event)
        await self._publish_condition(force=True)

    # --- loops ----------------------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        # Each node's beat starts at a random point of the interval: a process hosting a simulated
        # fleet of 2,000 nodes otherwise appended 2,000 heartbeats in one burst every interval and
        # held its event loop for seconds (records read late, claims released before bound).
        await asyncio.sleep(random.uniform(0.0, self.config.heartbeat_s))
        await every(lambda: self.config.heartbeat_s, self.heartbeat, f"{self.node}: heartbeat")

    async def heartbeat(self) -> None:
        await self.log.append(subjects.node(self.node), NodeHeartbeat(at=self.clock(), node=self.node))

    async def watch_loop(self) -> None:
        await self._watch_then_wait()  # the first look at once; later ones spread like the beats
        await asyncio.sleep(random.uniform(0.0, self.config.watch_s))
        await every(lambda: 0.0, self._watch_then_wait, f"{self.node}: health and usage watch")

    async def _watch_then_wait(self) -> None:
        self._due |= self._looks_due()
        if self._due:  # kept until a pass went through: a failed one is tried again
            await self.watch_once(self._due)
            self._due = set()
        try:
            await asyncio.wait_for(self.wake.wait(), self.config.watch_s)
        except asyncio.TimeoutError:
            pass
        self.wake.clear()

    def _looks_due(self) -> set[str]:
        """What to look at this pass: everything on real NVML; on a simulated node only what its
        fake NVML changed, and what a timer makes due (rescan, the periodic usage report, the end
        of an XID hold). A fleet of 2,000 simulated nodes would otherwise spend a third of a core
        every 3 s on passes over hardware that cannot change unseen, and a workload started or
        stopped costs a usage look, not a health probe of every card."""
        if self.changes is None:
            return set(LOOKS)
        due, now, config = set(self.changes()), self.clock(), self.config
        if now - self.rescanned_at >= config.rescan_s:
            due.add("rescan")
        if now - self.usage_at >= config.usage_every_s or config.kill_unallocated_after_s > 0:
            due.add("usage")  # the reaper's grace runs out between changes: it looks every pass
        if any(until <= now for until, _xid in self.xid_until.values()):
            due.add("health")
        return due

    async def watch_once(self, looks: set[str] | frozenset[str] = LOOKS) -> None:
        """One pass: rediscover when due, then health, then usage (those of `looks`)."""
        if "rescan" in looks and self.clock() - self.rescanned_at >= self.config.rescan_s:
            await self._rescan()
        if "health" in looks or "rescan" in looks:
            await self._watch_health()
        if "usage" in looks or "rescan" in looks:
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
        for uuid in [u for u, (until, _xid) in self.xid_until.items() if until <= now]:
            del self.xid_until[uuid]  # the hold is over: this pass sees the card as it is
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
        if force or condition != self.condition:  # remembered once stored: a failure is retried
            await self.log.append(subjects.node(self.node), NodeConditionChanged(
                at=self.clock(), node=self.node, condition=condition[0], reason=condition[1]))
            self.condition = condition

    async def _watch_usage(self) -> None:
        usages = self.last_usages = await self._nvml(observe_usage, self.nvml, self.inventory,
                                                      self.inventory.notes)
        signature, now = usage_signature(usages), self.clock()
        if signature == self.usage_sig and now - self.usage_at < self.config.usage_every_s:
            return
        await self.log.append(subjects.node(self.node), UsageObserved(at=now, node=self.node, devices=usages))
        self.usage_sig, self.usage_at = signature, now

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

    # --- workloads of ended claims --------------------------------------------------------

    def look_for_leftovers(self, claim: LiveClaim, kill: bool) -> None:
        """An ended claim's hook on a real node: see whether its processes are still there."""
        task = asyncio.ensure_future(self.leftover_processes(claim, kill))
        self._leftover_tasks.add(task)
        task.add_done_callback(self._leftover_tasks.discard)

    async def leftover_processes(self, claim: LiveClaim, kill: bool) -> list[int]:
        """Processes still running on the devices of an ended claim that no live claim holds now:
        reported (the quota service's drift check reports them too), and with `kill` sent SIGTERM.
        A device a live claim holds is never touched: its processes may be that claim's."""
        try:
            usages = await self._nvml(observe_usage, self.nvml, self.inventory, self.inventory.notes)
        except Exception as err:  # NVML trouble is the health watch's business
            log.warning("%s: cannot look for processes of ended claim %s: %s", self.node, claim.claim_id, err)
            return []
        held = {g.uuid for live in self.binder.live.values() for g in live.grants}
        ended = {g.uuid for g in claim.grants} - held
        pids = sorted({pid for usage in usages if usage.uuid in ended for pid in usage.pids})
        if pids:
            log.warning("%s: claim %s ended but processes %s still run on its devices%s", self.node,
                        claim.claim_id, pids, "; stopping them" if kill else "")
        for pid in pids if kill else ():
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError) as err:
                log.warning("%s: cannot stop process %d: %s", self.node, pid, err)
        return pids
