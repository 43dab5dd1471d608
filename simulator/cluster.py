"""Trace rows as the allocator's own events: nodes register, pods become claims."""

from __future__ import annotations

from schemas import events as ev
from schemas.catalogue import MODELS
from schemas.types import ClaimSpec, DeviceInfo

from ledger.evolve import evolve
from ledger.shapes import TypicalShape, typical_shapes
from ledger.state import State
from simulator.trace import NodeRow, PodRow

NAMESPACE = "openb"


def node_event(node: NodeRow, at: float = 0.0) -> ev.NodeRegistered:
    memory = MODELS[node.model].memory_gib * 1024 if node.model in MODELS else 0
    devices = [DeviceInfo(uuid=f"{node.name}/gpu{i}", index=i, model=node.model, memory_mib=memory)
               for i in range(node.gpus)]
    return ev.NodeRegistered(node=node.name, devices=devices, cpu_milli=node.cpu_milli,
                             memory_mib=node.memory_mib, simulated=True, at=at)


def claim_spec(pod: PodRow, claim_id: str) -> ClaimSpec:
    # A CPU-only claim is gpus=0 (its gpu_milli keeps the default and means nothing).
    return ClaimSpec(claim_id=claim_id, namespace=NAMESPACE, gpus=pod.num_gpu,
                     gpu_milli=pod.gpu_milli or 1000, cpu_milli=pod.cpu_milli,
                     memory_mib=pod.memory_mib, models=list(pod.models), workload=pod.name)


def cluster_state(nodes: tuple[NodeRow, ...]) -> State:
    """A state with the nodes registered in the given order (rank = position: the tie-break)."""
    state = State()
    for node in nodes:
        evolve(state, node_event(node))
    return state


def shape_of(pod: PodRow) -> TypicalShape:
    return TypicalShape(pod.cpu_milli, pod.gpu_milli, pod.num_gpu,
                        frozenset(pod.models) if pod.models else None)


def trace_shapes(pods: tuple[PodRow, ...]) -> tuple:
    """FGD's typical shapes of the original trace (no top-up copies)."""
    counts: dict[TypicalShape, int] = {}
    for pod in pods:
        shape = shape_of(pod)
        counts[shape] = counts.get(shape, 0) + 1
    return typical_shapes(counts)


def shape_label(pod: PodRow) -> str:
    """The bucket a failed pod is counted in."""
    if pod.num_gpu == 0:
        return "cpu-only"
    if pod.gpu_milli < 1000:
        return "share (<1 GPU)"
    return f"{pod.num_gpu} GPU" + ("s" if pod.num_gpu > 1 else "")
