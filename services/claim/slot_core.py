"""Model slots (Helix seed 002), the pure part: which warm slot takes a request, how many GPUs a new
slot needs and how its memory splits, which slots are stale. No I/O, no clock: `now` comes in.

A slot is one model served by one runtime (with an optional LoRA adapter) on `gpus` GPUs of one
node, taking up to `max_concurrency` requests at once. A request goes to a slot of the same model,
runtime and adapter that has free concurrency (the least busy, then the most recently used: the
warmest); only when none has room is a new slot planned. See docs/slots.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

RUNTIMES = ("vllm", "ollama")
USABLE = 0.95  # of a card's memory a slot may take: the driver and other processes keep the rest


class ModelSpec(NamedTuple):
    """A model an operator offers: vLLM's memory is configured; Ollama's is estimated from its file."""

    name: str
    runtime: str  # vllm | ollama
    memory_gib: float  # the whole slot's need (vLLM: configured; Ollama: estimate_ollama)
    max_concurrency: int = 1
    head_count: int = 0  # attention heads (vLLM's tensor parallel must divide them); 0: unknown


class SlotKey(NamedTuple):
    model: str
    runtime: str
    lora: str = ""  # LoRA adapter (directory or name); "" for the base model


@dataclass
class Slot:
    slot_id: str  # also the id of the claim that holds its GPUs
    key: SlotKey
    gpus: int
    memory_per_gpu_gib: float
    max_concurrency: int
    last_activity: float
    active: int = 0
    ended: bool = False  # its claim ended (released, evicted, lost): no longer takes requests

    @property
    def free(self) -> int:
        return 0 if self.ended else self.max_concurrency - self.active

    def is_stale(self, now: float, stale_after_s: float) -> bool:
        """Idle (no request running) for at least `stale_after_s`: an active slot is never stale."""
        return not self.ended and self.active == 0 and now - self.last_activity >= stale_after_s


class SlotPlan(NamedTuple):
    gpus: int
    memory_per_gpu_gib: float  # the model's need split evenly over the GPUs
    models: tuple[str, ...]  # GPU models of the fleet that can host it, most memory first


def warm_slot(slots: list[Slot], key: SlotKey) -> Slot | None:
    """The slot this request goes to: same model, runtime and adapter, with room; least busy first,
    then the most recently used (its caches are warmest)."""
    fits = [s for s in slots if s.key == key and s.free > 0]
    return min(fits, key=lambda s: (s.active, -s.last_activity, s.slot_id), default=None)


def gpu_counts(runtime: str, max_per_node: int, head_count: int = 0) -> list[int]:
    """GPU counts a slot of this runtime may have on a node with `max_per_node` GPUs of a model.

    Ollama (llama.cpp) splits layers across any number of GPUs: every count from 1 up. vLLM's
    tensor parallelism splits the attention heads, so the count must divide the model's head count
    (any such count, 3 or 6 included, when the heads are known; else the powers of two)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    counts = range(1, max_per_node + 1)
    if runtime == "ollama":
        return list(counts)
    if head_count > 0:
        return [n for n in counts if head_count % n == 0]
    return [n for n in counts if n & (n - 1) == 0]


def plan_slot(model: ModelSpec, fleet: dict[str, tuple[float, int]]) -> SlotPlan | None:
    """The fewest GPUs (of one node) whose even share of the model's memory fits a card of the
    fleet. `fleet`: GPU model -> (GiB per card, most cards of it on one node). None: no node of the
    fleet can ever host it (too big, or no count the runtime allows fits)."""
    best: SlotPlan | None = None
    for gpus in sorted({n for _, per_node in fleet.values()
                        for n in gpu_counts(model.runtime, per_node, model.head_count)}):
        share = model.memory_gib / gpus
        hosts = tuple(m for m, (gib, per_node) in sorted(fleet.items(), key=lambda kv: (-kv[1][0], kv[0]))
                      if per_node >= gpus and share <= gib * USABLE
                      and gpus in gpu_counts(model.runtime, per_node, model.head_count))
        if hosts:
            best = SlotPlan(gpus, round(share, 3), hosts)
            break
    return best


def stale_slots(slots: list[Slot], now: float, stale_after_s: float) -> list[Slot]:
    """Slots idle for at least `stale_after_s`, the longest idle first (evicted in that order)."""
    return sorted((s for s in slots if s.is_stale(now, stale_after_s)), key=lambda s: (s.last_activity, s.slot_id))
