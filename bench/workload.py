"""Synthetic fleets and claim mixes for the benchmarks (deterministic for a seed)."""

from __future__ import annotations

import random

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo

A100_MIG_LAYOUTS = (("3g.40gb", "4g.40gb"), ("2g.20gb",) * 3 + ("1g.10gb",), ("1g.10gb",) * 7)


def fleet(nodes: int, seed: int = 7) -> list[ev.NodeRegistered]:
    """8-GPU nodes: 70 % H100 (two NVLink islands), 20 % A100 (every other one in MIG mode),
    10 % L40S; a few labels and CUDA versions so filters have work to do."""
    rng = random.Random(seed)
    out = []
    for i in range(nodes):
        roll = rng.random()
        name = f"node-{i:05d}"
        if roll < 0.7:
            devices = _cards(name, "H100", 81559, islands=2)
        elif roll < 0.9:
            devices = _a100(name, mig=(i % 2 == 0))
        else:
            devices = _cards(name, "L40S", 46068, islands=8)
        out.append(ev.NodeRegistered(node=name, devices=devices, cpu_milli=128_000, memory_mib=1 << 20,
                                     labels={"zone": f"z{i % 4}"}, cuda_version=rng.choice(["12.4", "12.8"]),
                                     at=0.0))
    return out


def _cards(name: str, model: str, mib: int, islands: int) -> list[DeviceInfo]:
    per = 8 // islands
    return [DeviceInfo(uuid=f"GPU-{name}-{g}", index=g, model=model, memory_mib=mib, island=g // per)
            for g in range(8)]


def _a100(name: str, mig: bool) -> list[DeviceInfo]:
    if not mig:
        return _cards(name, "A100", 81920, islands=1)
    devices = []
    for g in range(8):
        devices.append(DeviceInfo(uuid=f"GPU-{name}-{g}", index=g, model="A100", memory_mib=81920,
                                  mig_enabled=True))
        for j, profile in enumerate(A100_MIG_LAYOUTS[g % len(A100_MIG_LAYOUTS)]):
            memory = int(profile.split(".")[1].removesuffix("gb")) * 1024
            devices.append(DeviceInfo(uuid=f"MIG-{name}-{g}-{j}", index=g, mig_index=j, model="A100",
                                      memory_mib=memory, mig_profile=profile))
    return devices


def claim_mix(rng: random.Random, claim_id: str, at: float) -> list[ClaimSpec]:
    """One arrival: usually one claim, sometimes a gang of several."""
    roll = rng.random()
    base = {"namespace": f"team-{rng.randrange(8)}", "cpu_milli": rng.choice([2000, 4000, 8000]),
            "memory_mib": rng.choice([8192, 16384, 32768])}
    if roll < 0.35:
        shape = {"gpus": rng.choice([1, 1, 1, 2, 2, 4, 8]), "models": [rng.choice(["H100", "H100", "A100", "L40S"])]}
    elif roll < 0.60:
        shape = {"gpus": 1, "gpu_milli": rng.choice([100, 250, 500, 750])}
    elif roll < 0.72:
        shape = {"gpus": 1, "mig_profile": rng.choice(["1g.10gb", "2g.20gb", "3g.40gb"])}
    elif roll < 0.82:
        shape = {"gpus": 1, "gpu_memory_gib": rng.choice([10.0, 20.0, 40.0]), "models": ["H100"]}
    elif roll < 0.92:
        shape = {"gpus": 0, "model_memory_gib": rng.choice([60.0, 140.0, 280.0]), "models": ["H100"]}
    else:
        size = rng.choice([2, 4])
        return [ClaimSpec(claim_id=f"{claim_id}-{m}", gang_id=claim_id, gang_size=size, gpus=8,
                          models=["H100"], **base) for m in range(size)]
    return [ClaimSpec(claim_id=claim_id, **base, **shape)]
