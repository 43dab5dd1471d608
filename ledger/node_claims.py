"""How many claims one node may hold at once: its cap, as a kubelet takes at most `maxPods`.

Why: a node's live claims go to its agent as one record, one NATS message (schemas.grants), and
nothing bounded them: about 20,000 CPU-only claims of 1 milli-CPU on one node (session 32's
outsider) made a record past nats-server's 1 MB max payload. Placement now refuses a node whose
live claims or device grants reached its cap (services/allocator/core/rules.py,
`node-claims-full`: the claim waits, or goes to another node).

The cap of a node, from the log alone (pure: the same in every fold), the first that is set:
- its label `gpuledger.io/max-claims` (a whole number, set by its agent: GPULEDGER_NODE_LABELS),
  at most CEILING; a value that is no whole number from 1 up is ignored;
- its pools' `max_claims_per_node` (PoolSpec; 0: not set): the lowest of the pools its devices
  are in, as a node holds one cap whatever pools its devices serve;
- the fleet default (FleetDefaultsSet's `max_claims_per_node`, `gpuledger pool defaults`; 0: not set);
- else BASE + PER_DEVICE for each of its devices (a card, or a MIG instance), or the device's
  time-slices where its pool gives it more (slices_per_unit), at most CEILING. An 8-card node:
  190; 8 cards in 7 MIG instances each: 670; 8 cards of 64 time-slices: 622.
Claims that hold no device (CPU-only claims) take at most the cap less what the node's devices
bring: `grantless_cap`, BASE (110) under the formula, so the per-device part stays for claims that
hold devices. Before session 34 about 1,000 never-ending CPU-only claims of 1 milli-CPU filled
every cap of the demo fleet and every GPU claim waited `node-claims-full` beside free GPUs (session
34's outsider). A cap set explicitly keeps the same part for devices, but never leaves CPU-only
claims less than BASE where it can keep one claim a device beside them: its operator chose that
number. A cap below that (110 or less, say) still keeps one claim a device and gives CPU-only
claims the rest (a cap under twice the devices keeps what is above their number: a cap of 2 on 8
cards keeps nothing): until session 35 such a cap kept nothing back, and a CPU-only crowd could
fill the node beside its free cards.
A cap set lower than what a node holds evicts nothing (as a kubelet's maxPods): the node takes no
claim until it is under its cap again (docs/pools.md, "A node's cap of live claims").

What it bounds: a node is full when its live claims, or the device grants they hold (a claim of
8 GPUs holds 8), reach the cap, and a claim takes a node only with room for its grants. A record
entry costs at most 235 bytes for the claim (a 128-character id, a 63-character namespace) plus
200 for each grant (a 63-character node name and an NVML UUID; 415 for a 256-character UUID, the
longest an inventory may register), so a record stays under CEILING x 435 bytes = 435 KB (660 KB
with the longest UUIDs), well under the 1 MB max payload (tests/sched_limits checks the figures).
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.types import MAX_CLAIMS_PER_NODE

LABEL = "gpuledger.io/max-claims"
# kubelet's default maxPods: room for CPU-only claims and the claims sharing a node's devices
BASE = 110
# claims sharing one device (HAMi's default deviceSplitCount), unless its time-slices are more
PER_DEVICE = 10
CEILING = MAX_CLAIMS_PER_NODE  # 1,000: no node's cap is more, what keeps its record well under 1 MB (above)
# the most one claim holds on a node (a claim has at most 64 GPUs): the room a node view keeps
# counts up to this, so nodes far from their cap share views as before
ROOM = 64


def max_claims(units, labels: dict[str, str], pool_caps: Iterable[int] = (), fleet: int = 0) -> int:
    """A node's cap, from its devices (`ledger.state.Unit`s, each with `max_holders`, its
    time-slices: 0 for none), its labels, the caps its devices' pools set and the fleet default
    (0: not set), in that order of precedence."""
    asked = _whole(labels.get(LABEL, ""))
    if asked is not None:
        return min(asked, CEILING)
    pooled = min((cap for cap in pool_caps if cap > 0), default=0)
    if pooled:
        return min(pooled, CEILING)
    if fleet > 0:
        return min(fleet, CEILING)
    return min(BASE + device_part(units), CEILING)


def device_part(units) -> int:
    """What a node's devices bring to the formula's cap: PER_DEVICE each, or their time-slices."""
    return sum(max(unit.max_holders, PER_DEVICE) for unit in units)


def grantless_cap(cap: int, units) -> int:
    """How many claims holding no device the node may hold: the cap less its devices' part, but
    never less than BASE where the cap still keeps one claim a device beside them. A smaller cap
    keeps one claim a device; one under twice the devices keeps what is above their number (none,
    where the cap is no more than the devices: the operator's whole number for any claim)."""
    if not units:
        return cap
    devices = len(units)
    kept = min(device_part(units), max(cap - BASE, min(devices, cap - devices)))
    return cap - max(kept, 0)


def source(labels: dict[str, str], pool_caps: Iterable[int] = (), fleet: int = 0) -> str:
    """Which setting gave a node its cap, in words (`claim explain`, `gpuledger state`)."""
    if _whole(labels.get(LABEL, "")) is not None:
        return f"label {LABEL}"
    if any(cap > 0 for cap in pool_caps):
        return "its pool's max_claims_per_node"
    if fleet > 0:
        return "the fleet default (gpuledger pool defaults)"
    return f"{BASE} + {PER_DEVICE} per device"


def label_problem(labels: dict[str, str]) -> str:
    """What is wrong with a node's cap label ("" when nothing, or no label): the node agent checks
    its own at start, where the fold would only ignore a bad value."""
    text = labels.get(LABEL)
    if text is None:
        return ""
    value = _whole(text)
    if value is None:
        return f"label {LABEL}: {text[:40]!r} is not a whole number from 1 up"
    if value > CEILING:
        return f"label {LABEL}: {value} is more than {CEILING}, the most live claims a node may hold"
    return ""


def room(cap: int, claims: int, grants: int) -> int:
    """How many more grants (a CPU-only claim counts one) a node may take, up to ROOM."""
    left = cap - (claims if claims > grants else grants)
    return ROOM if left >= ROOM else (left if left > 0 else 0)


def _whole(text: str) -> int | None:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:  # ("١٢" and "²" are no cap)
        return None
    value = int(text)
    return value if value >= 1 else None
