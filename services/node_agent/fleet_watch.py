"""A simulated fleet's health and usage watch: one ticker for every node of the process.

`NodeAgent.watch_loop` wakes its node every `watch_s` (3 s) to ask what is due: at 2,000 nodes that
was 667 timed wake-ups a second, each a task woken and a timer made, nearly all of them finding
nothing (a simulated node is looked at only when its fake NVML changed or a report is due, see
`NodeAgent._looks_due`). Here one task wakes every `TICK_S`, asks each node whose watch is due, or
that was woken (a fault or process command), what is due, and runs a pass only for the nodes with
something to look at, each in a task of its own: an append waiting out a NATS outage holds up its
own node only. A pass that fails on NATS trouble is tried again after the node's backoff, never
fatal. A real node's agent, one node per process, keeps `NodeAgent.watch_loop`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from services.node_agent.retry import TRANSIENT, Backoff

log = logging.getLogger("gpuledger.node_agent")
TICK_S = 0.25  # a woken node is looked at within this; a due one at most this late


class _Slot:
    """One node's watch schedule."""

    __slots__ = ("agent", "due", "backoff", "task")

    def __init__(self, agent, due: float):
        self.agent, self.due, self.backoff = agent, due, Backoff()
        self.task: asyncio.Task | None = None


class FleetWatch:
    def __init__(self, agents: list, monotonic: Callable[[], float] = time.monotonic):
        self.monotonic = monotonic
        now = monotonic()
        # after the first pass, each node's next at a random point of its interval (as the beats)
        self.slots = [_Slot(a, now + random.uniform(0.0, a.config.watch_s)) for a in agents]
        self._slots = {slot.agent.node: slot for slot in self.slots}
        self.passes = 0
        self.tick_s = min([TICK_S] + [a.config.watch_s for a in agents[:1]])  # tests watch faster

    def first_look(self, agent) -> None:
        """Start a node's first pass as soon as it is registered (as `watch_loop` starts with),
        without waiting for it; one that fails is tried again by the ticker."""
        slot = self._slots[agent.node]
        self._start(slot, agent._looks_due())

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self.tick()

    def tick(self) -> None:
        """Start a pass for every node that is due or woken and has something to look at."""
        now = self.monotonic()
        for slot in self.slots:
            agent = slot.agent
            if slot.task is not None or (slot.due > now and not agent.wake.is_set()):
                continue
            agent.wake.clear()
            slot.due = now + agent.config.watch_s
            self._start(slot, agent._looks_due())

    def _start(self, slot: _Slot, looks: set[str]) -> None:
        agent = slot.agent
        agent._due |= looks  # kept until a pass went through: a failed one is tried again
        if agent._due:
            slot.task = asyncio.ensure_future(self._look(slot))

    async def _look(self, slot: _Slot) -> None:
        agent = slot.agent
        try:
            await agent.watch_once(agent._due)
            agent._due = set()
            slot.backoff.reset()
            self.passes += 1
        except TRANSIENT as err:
            delay = slot.backoff.next()
            slot.due = self.monotonic() + delay
            log.warning("%s: health and usage watch failed (%s: %s); again in %.1f s",
                        agent.node, type(err).__name__, err, delay)
        except Exception:  # a bug in one pass must not end the node's watch: logged, tried again
            slot.due = self.monotonic() + slot.backoff.next()
            log.exception("%s: health and usage watch failed", agent.node)
        finally:
            slot.task = None
