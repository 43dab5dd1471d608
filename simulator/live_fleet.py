"""A trace's nodes as simulated node agents in the running system: registered, heartbeating, binding.

Registration is the node agent's own: each trace node becomes a `SimNodeSpec`, a fake NVML
(`services.node_agent.fakenvml`) and a `NodeAgent`, whose `register()` discovers the fake cards and
appends `NodeRegistered` + `NodeConditionChanged` exactly as `gpuledger up --demo` does.

What differs is scale. An agent's own loops (a durable decision consumer, a heartbeat and a watch
per node) would be 1,213 consumers reading every decision batch for openb; here one task per duty
serves every node: heartbeats of all nodes go out as one `EventBatch` per round, and the bindings of
one decision batch (`ClaimBound`, env from the agent's `bind_env`) as one `EventBatch`, the shape
`schemas.events.EventBatch` was made for. Both go on one subject of the fleet's own.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from schemas import subjects
from schemas.catalogue import MODELS, GpuModel
from schemas.events import ClaimAllocated, ClaimBound, DecisionBatch, EventBatch, NodeHeartbeat
from schemas.types import DeviceInfo
from services.node_agent.agent import AgentConfig, NodeAgent
from services.node_agent.binding import bind_env
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import SimNodeSpec
from simulator.trace import NodeRow

BATCH = 256  # events per EventBatch message (a heartbeat is ~80 bytes: far below NATS's 1 MB)


def gpu_model(name: str) -> GpuModel:
    """The catalogue model, with a product name the fake NVML can report. The trace's undisclosed
    models (G1..G3) have none, and models outside the catalogue (openb's A10) are unknown: their
    own name is the product, which discovery maps back to the same model name."""
    known = MODELS.get(name)
    if known is not None and known.products:
        return known
    if known is not None:
        return msgspec.structs.replace(known, products=(name,))
    return GpuModel(name or "none", None, "unknown", 0, 0.0, products=(name or "none",))


def sim_node(row: NodeRow, prefix: str, labels: dict[str, str]) -> SimNodeSpec:
    """No NVLink (islands=0): the trace says nothing about it, like `simulator.cluster.node_event`."""
    return SimNodeSpec(name=prefix + row.name, model=gpu_model(row.model), gpus=row.gpus, islands=0,
                       labels=dict(labels), cpu_milli=row.cpu_milli, memory_mib=row.memory_mib)


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class TraceFleet:
    def __init__(self, nodes: Iterable[NodeRow], prefix: str, labels: dict[str, str], event_log: Any,
                 nc: Any, clock: Callable[[], float] = time.time):
        self.log, self.clock = event_log, clock
        self.subject = subjects.fleet(prefix)  # the fold believes it for `prefix*` nodes only
        self.agents: dict[str, NodeAgent] = {}
        for row in nodes:
            spec = sim_node(row, prefix, labels)
            fake = FakeNvml.from_node_spec(spec)
            fake.nvmlInit()
            config = AgentConfig(node=spec.name, labels=dict(spec.labels), cpu_milli=spec.cpu_milli,
                                 memory_mib=spec.memory_mib, simulated=True)
            self.agents[spec.name] = NodeAgent(fake, config, event_log, nc, clock=clock)
        self._devices: dict[str, dict[str, DeviceInfo]] = {}
        self.bound = 0

    async def register(self, concurrency: int = 32) -> None:
        """Every node through its agent's discovery; `concurrency` registrations in flight."""
        gate = asyncio.Semaphore(concurrency)

        async def one(agent: NodeAgent) -> None:
            async with gate:
                await agent.register()
            self._devices[agent.node] = {f.info.uuid: f.info for f in agent.inventory.devices}

        await asyncio.gather(*(one(agent) for agent in self.agents.values()))

    async def heartbeat_forever(self, every_s: float) -> None:
        while True:
            await self.heartbeat()
            await asyncio.sleep(every_s)

    async def heartbeat(self) -> None:
        now = self.clock()
        beats = [NodeHeartbeat(at=now, node=name) for name in self.agents]
        for chunk in _chunks(beats, BATCH):
            await self.log.append(self.subject, EventBatch(events=chunk, at=now))

    async def bind(self, batch: DecisionBatch) -> int:
        """Bind what the batch allocated on this fleet's nodes; how many were bound."""
        now = self.clock()
        bound = [ClaimBound(at=now, claim_id=d.claim_id, node=d.node, env=binding.env)
                 for d in batch.decisions if isinstance(d, ClaimAllocated) and d.node in self._devices
                 for binding in (bind_env(d, self._devices[d.node]),) if binding.ok]
        for chunk in _chunks(bound, BATCH):
            ids = "\n".join(b.claim_id for b in chunk)
            # a retried append of the same bindings is stored once, like the agent's bound-<claim>
            await self.log.append(self.subject, EventBatch(events=chunk, at=now),
                                  msg_id="bound-" + hashlib.sha256(ids.encode()).hexdigest()[:32])
        self.bound += len(bound)
        return len(bound)
