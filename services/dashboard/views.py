"""What the dashboard shows, as plain data from a folded state (pure: no I/O, no clock).

The fleet as nodes, NVLink islands and cards, each card with its holders and the colour of the
claim holding it; the queue with each pending claim's reasons; quota use per namespace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ledger import census
from ledger.state import FREE, State, Unit

FREE_COLOUR = "#dfe4ea"
UNHEALTHY_COLOUR = "#3d0d0d"
MAX_NODES = 200  # a page, not a database: a larger fleet is summed up in a line


def colour_of(claim_id: str) -> str:
    """A colour per claim, the same on every page and every reload (a hash, not an order); hues
    spread over the wheel, saturated and mid-light so any two differ from free grey and each other."""
    digest = hashlib.sha256(claim_id.encode()).digest()
    hue = int.from_bytes(digest[:2], "big") % 360
    return _hsl_to_hex(hue, 0.70, 0.50)


def _hsl_to_hex(hue: int, saturation: float, lightness: float) -> str:
    chroma = (1 - abs(2 * lightness - 1)) * saturation
    x = chroma * (1 - abs((hue / 60) % 2 - 1))
    m = lightness - chroma / 2
    r, g, b = [(chroma, x, 0), (x, chroma, 0), (0, chroma, x), (0, x, chroma), (x, 0, chroma),
               (chroma, 0, x)][hue // 60 % 6]
    return "#" + "".join(f"{round((v + m) * 255):02x}" for v in (r, g, b))


@dataclass
class Card:
    uuid: str
    index: int
    label: str  # "0" or "0/mig 3" for a MIG instance
    model: str
    pool: str
    state: str  # free | allocated | unhealthy
    holders: list[tuple[str, int]]  # (claim id, milli)
    colours: list[str]
    used_milli: int


@dataclass
class Island:
    name: str
    cards: list[Card] = field(default_factory=list)


@dataclass
class NodeBox:
    name: str
    condition: str
    models: str
    islands: list[Island]


def _card(unit: Unit) -> Card:
    state = census.unit_state(unit)
    holders = sorted(unit.holders.items())
    colours = [colour_of(c) for c, _ in holders] if holders else [
        UNHEALTHY_COLOUR if state == "unhealthy" else FREE_COLOUR]
    label = f"{unit.index}" if unit.mig_index < 0 else f"{unit.index}/mig {unit.mig_index}"
    return Card(unit.uuid, unit.index, label, unit.model, unit.pool, state, holders, colours,
                FREE - unit.milli_free)


def fleet(state: State, limit: int = MAX_NODES) -> list[NodeBox]:
    """Nodes in registration order; inside each, cards grouped by NVLink island."""
    boxes = []
    for node in sorted(state.nodes.values(), key=lambda n: n.rank)[:limit]:
        islands: dict[str, Island] = {}
        for unit in node.units:
            name = unit.island_name or f"island {unit.island}"
            islands.setdefault(name, Island(name)).cards.append(_card(unit))
        condition = "Lost" if node.lost else node.condition
        models = ", ".join(sorted({u.model for u in node.units})) or "no GPU"
        boxes.append(NodeBox(node.name, condition, models, list(islands.values())))
    return boxes


def totals(state: State) -> dict[str, int]:
    """GPUs by state, over the whole fleet."""
    out = {"free": 0, "allocated": 0, "unhealthy": 0}
    for (_model, _pool, _unit, unit_state), count in census.gpus(state).items():
        out[unit_state] += count
    return out


@dataclass
class Waiting:
    claim_id: str
    namespace: str
    shape: str
    priority: int
    submitted_at: float
    reason_code: str
    reasons: list[str]


def queue(state: State, limit: int = 200) -> list[Waiting]:
    """Pending claims in the order the allocator tries them: priority first, then age."""
    waiting = [state.claims[c] for c in state.pending if c in state.claims]
    waiting.sort(key=lambda c: (-c.spec.priority, c.seq))
    return [Waiting(c.claim_id, c.spec.namespace, shape(c.spec), c.spec.priority, c.submitted_at,
                    census.pending_reason(state, c.claim_id), [r.message for r in c.reasons])
            for c in waiting[:limit]]


def shape(spec) -> str:
    where = "/".join(spec.models) or "/".join(spec.gpu_groups) or "GPU"
    if spec.mig_profile:
        return f"{spec.gpus} x MIG {spec.mig_profile}"
    if spec.gpus == 0 and not spec.model_memory_gib:
        return "CPU only"
    if spec.model_memory_gib:
        return f"{spec.model_memory_gib:g}Gi model on {where}"
    if spec.gpu_milli < FREE:
        return f"{spec.gpu_milli}m of one {where}"
    return f"{spec.gpus} x {where}"


@dataclass
class QuotaRow:
    namespace: str
    used: dict[str, float]
    limits: dict[str, float]


def quotas(state: State) -> list[QuotaRow]:
    """Every namespace with a quota or with use, its use against its totals."""
    used, limits = census.quota_used(state), census.quota_limits(state)
    namespaces = sorted({ns for ns, _ in used} | {ns for ns, _ in limits})
    return [QuotaRow(ns, {r: v for (n, r), v in used.items() if n == ns},
                     {r: v for (n, r), v in limits.items() if n == ns}) for ns in namespaces]
