"""What only a simulated fleet does: faults and processes on command, and a fake workload process
on every device a claim is bound to (so usage, activity and drift look like a real cluster).

Commands (request/reply, JSON; the reply is {"ok": true, ...} or {"ok": false, "error": ...}):
  gpu.cmd.node.fault    {"node", "index", "health": "Faulted"|"Healthy", "kind": "ecc"|"lost"|
                         "row-remap"|"xid", "xid": 79}
  gpu.cmd.node.process  {"node", "index", "mig_index": -1, "pid", "used_mib", "utilization_percent",
                         "action": "start"|"stop"}
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from typing import Annotated, Any

import msgspec

from schemas import subjects
from schemas.grants import LiveClaim
from schemas.strict_json import check_no_duplicate_keys
from services.node_agent.agent import NodeAgent
from services.node_agent.fakenvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

log = logging.getLogger("gpuledger.node_agent")

FAULT_SUBJECT = subjects.command("node.fault")
PROCESS_SUBJECT = subjects.command("node.process")
FAULT_KINDS = ("ecc", "lost", "row-remap", "xid")


class FaultCommand(msgspec.Struct, forbid_unknown_fields=True):
    node: str
    index: Annotated[int, msgspec.Meta(ge=0)]
    health: str = "Faulted"
    kind: str = "ecc"
    xid: Annotated[int, msgspec.Meta(ge=1)] = 79


class ProcessCommand(msgspec.Struct, forbid_unknown_fields=True):
    node: str
    index: Annotated[int, msgspec.Meta(ge=0)]
    pid: Annotated[int, msgspec.Meta(ge=1)]
    mig_index: int = -1
    used_mib: Annotated[int, msgspec.Meta(ge=0)] = 1024
    utilization_percent: Annotated[int, msgspec.Meta(ge=0, le=100)] = 50
    action: str = "start"


class CommandError(ValueError):
    pass


class SimulatedFleet:
    """The agents of one simulated fleet and their fake NVMLs, addressed by node name."""

    def __init__(self, agents: list[NodeAgent], fakes: dict[str, FakeNvml]):
        self.agents = {a.node: a for a in agents}
        self.fakes = fakes
        self._pids = itertools.count(40_000)
        self._workloads: dict[str, tuple[str, list[tuple[Any, int]]]] = {}  # claim -> node, processes
        # node -> what of its fake NVML changed since its agent last looked
        self._touched: dict[str, set[str]] = {node: {"health", "usage"} for node in self.fakes}
        for node, agent in self.agents.items():
            agent.changes = lambda node=node: self._touched.pop(node, set())

    def _touch(self, node: str, *looks: str) -> None:
        self._touched.setdefault(node, set()).update(looks)

    # --- commands -------------------------------------------------------------------------

    async def subscribe(self, nc) -> list:
        return [await nc.subscribe(FAULT_SUBJECT, cb=self._reply(self.fault, FaultCommand)),
                await nc.subscribe(PROCESS_SUBJECT, cb=self._reply(self.process, ProcessCommand))]

    def _reply(self, handler, kind):
        async def on_msg(msg) -> None:
            try:
                command = msgspec.json.decode(msg.data, type=kind)
                check_no_duplicate_keys(msg.data)  # a key written twice is refused, as everywhere
                answer = {"ok": True, **handler(command)}
                self._wake(command.node)
            except (msgspec.DecodeError, msgspec.ValidationError, CommandError) as err:
                answer = {"ok": False, "error": str(err)}
            except (ValueError, RecursionError) as err:  # invalid UTF-8, nested too deep
                answer = {"ok": False, "error": f"malformed JSON: {type(err).__name__}"}
            if msg.reply:
                await msg.respond(json.dumps(answer).encode())
        return on_msg

    def _wake(self, node: str) -> None:
        self.agents[node].wake.set()  # look now, not at the next watch tick

    def _gpu(self, node: str, index: int) -> FakeGpu:
        fake = self.fakes.get(node)
        if fake is None:
            raise CommandError(f"node: {node!r} is not in this simulated fleet "
                               f"(nodes: {', '.join(self.fakes)})")
        try:
            return fake.gpu(index)
        except KeyError:
            raise CommandError(f"index: node {node} has no GPU {index} "
                               f"(it has {len(fake.gpus)})") from None

    def fault(self, command: FaultCommand) -> dict:
        """Make a card faulty in NVML terms, or heal it; the agent's health watch does the rest."""
        gpu = self._gpu(command.node, command.index)
        if command.health == "Healthy":
            gpu.fault, gpu.pending_xids = "", []
            self.agents[command.node].xid_until.pop(gpu.uuid, None)
        elif command.health == "Faulted":
            if command.kind not in FAULT_KINDS:
                raise CommandError(f"kind: must be one of {', '.join(FAULT_KINDS)}, got {command.kind!r}")
            if command.kind == "xid":
                gpu.pending_xids.append(command.xid)
            else:
                gpu.fault = command.kind
        else:
            raise CommandError(f"health: must be Faulted or Healthy, got {command.health!r} "
                               "(Ignored is an operator's decision, not simulated hardware)")
        self._touch(command.node, "health", "usage")
        return {"node": command.node, "uuid": gpu.uuid, "health": command.health}

    def process(self, command: ProcessCommand) -> dict:
        """Start or stop a fake process on a card or MIG instance (for drift and usage tests)."""
        target = self._target(command)
        if command.action == "start":
            target.processes[command.pid] = FakeProcess(command.pid, command.used_mib,
                                                        command.utilization_percent)
        elif command.action == "stop":
            if target.processes.pop(command.pid, None) is None:
                raise CommandError(f"pid: no process {command.pid} on that device")
        else:
            raise CommandError(f"action: must be start or stop, got {command.action!r}")
        self._touch(command.node, "usage")
        return {"node": command.node, "uuid": target.uuid, "pid": command.pid}

    def _target(self, command: ProcessCommand) -> FakeGpu | FakeMig:
        gpu = self._gpu(command.node, command.index)
        if command.mig_index < 0:
            if gpu.mig_enabled:
                raise CommandError(f"mig_index: GPU {command.index} on {command.node} is in MIG "
                                   "mode; name one of its instances")
            return gpu
        if command.mig_index >= len(gpu.migs):
            raise CommandError(f"mig_index: GPU {command.index} has {len(gpu.migs)} MIG instances")
        return gpu.migs[command.mig_index]

    # --- workloads ------------------------------------------------------------------------

    def start_workload(self, node: str, allocation: LiveClaim) -> None:
        """Every bound claim runs a fake process on each granted device until the claim ends
        (started again if the agent restarts and finds it still live and bound)."""
        self.end_workload(allocation.claim_id)
        fake, started = self.fakes[node], []
        busy = 40 + int(hashlib.sha1(allocation.claim_id.encode()).hexdigest(), 16) % 56
        for grant in allocation.grants:
            device = _device(fake, grant.index, grant.mig_index)
            if device is None:
                continue
            pid = next(self._pids)
            memory = grant.memory_mib or device.memory_mib * grant.milli // 1000
            device.processes[pid] = FakeProcess(pid, int(memory * 0.8), busy)
            started.append((device, pid))
        self._workloads[allocation.claim_id] = (node, started)
        self._touch(node, "usage")

    def end_workload(self, claim_id: str) -> None:
        node, started = self._workloads.pop(claim_id, ("", []))
        for device, pid in started:
            device.processes.pop(pid, None)
        if node:
            self._touch(node, "usage")


def _device(fake: FakeNvml, index: int, mig_index: int) -> FakeGpu | FakeMig | None:
    try:
        gpu = fake.gpu(index)
    except KeyError:
        return None
    if mig_index >= 0:
        return gpu.migs[mig_index] if mig_index < len(gpu.migs) else None
    return gpu
