"""Small builders for quota tests: a fleet, quotas, claims, and one decide-and-fold step."""

from __future__ import annotations

from schemas import events as ev
from schemas.commands import SetQuota
from schemas.types import ClaimSpec, DeviceInfo

from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import evolve
from ledger.state import State
from services.quota.validation import spec_from_command


def node(name: str, gpus: int = 8, model: str = "H100", memory_gib: int = 80) -> ev.NodeRegistered:
    devices = [DeviceInfo(uuid=f"{name}-gpu{i}", index=i, model=model, memory_mib=memory_gib * 1024)
               for i in range(gpus)]
    return ev.NodeRegistered(node=name, devices=devices, cpu_milli=64000, memory_mib=512 * 1024, at=1.0)


def quota(namespace: str, **fields) -> ev.QuotaSet:
    spec = spec_from_command(SetQuota(namespace=namespace, **fields), {})
    return ev.QuotaSet(namespace=namespace, spec=spec, at=1.0)


def claim(claim_id: str, namespace: str = "team-a", at: float = 2.0, **fields) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=namespace, **fields), at=at)


def fleet(*events) -> State:
    state = State()
    for seq, event in enumerate(events, start=1):
        evolve(state, event, seq)
    return state


def step(state: State, now: float = 10.0, **ctx) -> list:
    """Decide once and fold the decisions, as the allocator does after its append."""
    decisions = decide(state, DecideContext(now=now, check_timers=False, **ctx))
    if decisions:
        evolve(state, ev.DecisionBatch(decisions=decisions, at=now), state.last_seq + 1)
    return decisions


def add(state: State, *events) -> State:
    for event in events:
        evolve(state, event, state.last_seq + 1)
    return state


def of_type(decisions, kind) -> list:
    return [d for d in decisions if isinstance(d, kind)]
