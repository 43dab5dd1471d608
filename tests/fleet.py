"""Small fleets and claims for core tests (the same shapes the demo uses)."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo
from ledger.evolve import evolve
from ledger.state import State

H100_MIB = 81559


def h100_node(name: str, gpus: int = 8, islands: int = 2, cuda: str = "12.8", labels=None,
              at: float = 0.0) -> ev.NodeRegistered:
    per_island = max(gpus // islands, 1)
    devices = [DeviceInfo(uuid=f"GPU-{name}-{i}", index=i, model="H100", memory_mib=H100_MIB,
                          product="NVIDIA H100 80GB HBM3", island=i // per_island) for i in range(gpus)]
    return ev.NodeRegistered(node=name, devices=devices, cpu_milli=128000, memory_mib=1 << 20,
                             cuda_version=cuda, labels=labels or {}, at=at)


def a100_mig_node(name: str, at: float = 0.0) -> ev.NodeRegistered:
    """4 A100s in MIG mode: 7 x 1g.10gb, 3g.40gb + 4g.40gb, 2 x 3g.40gb, one card without MIG."""
    layouts = [["1g.10gb"] * 7, ["3g.40gb", "4g.40gb"], ["3g.40gb", "3g.40gb"]]
    devices = []
    for card, layout in enumerate(layouts):
        devices.append(DeviceInfo(uuid=f"GPU-{name}-{card}", index=card, model="A100", memory_mib=81920,
                                  mig_enabled=True))
        for j, profile in enumerate(layout):
            memory = int(profile.split(".")[1].removesuffix("gb")) * 1024
            devices.append(DeviceInfo(uuid=f"MIG-{name}-{card}-{j}", index=card, mig_index=j, model="A100",
                                      memory_mib=memory, mig_profile=profile))
    devices.append(DeviceInfo(uuid=f"GPU-{name}-3", index=3, model="A100", memory_mib=81920))
    return ev.NodeRegistered(node=name, devices=devices, cpu_milli=64000, memory_mib=512 * 1024,
                             cuda_version="12.4", at=at)


def claim(claim_id: str, namespace: str = "team-a", **fields) -> ev.ClaimSubmitted:
    at = fields.pop("at", 0.0)
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=namespace, **fields), at=at)


class Ledger:
    """A state plus the log that produced it: append = store then fold, like the services."""

    def __init__(self) -> None:
        self.state = State()
        self.events: list[tuple[int, ev.Event]] = []

    def append(self, *events: ev.Event) -> None:
        for event in events:
            seq = len(self.events) + 1
            self.events.append((seq, event))
            evolve(self.state, event, seq)

    def decide(self, now: float, **ctx) -> list:
        from services.allocator.core.decide import DecideContext, decide

        ctx.setdefault("check_timers", False)  # tests that want leases/node loss say so
        decisions = decide(self.state, DecideContext(now=now, **ctx))
        if decisions:
            self.append(ev.DecisionBatch(decisions=decisions, at=now))
        return decisions
