"""Upcasters: older versions of stored things upgraded on read, one registered step at a time.

What is stored is never rewritten: an event keeps the `v` it was appended with, a snapshot its
`version`. When a type's shape changes in a way a default cannot cover, its version goes up by one
and a function registered here for (kind, old version) turns the old payload, as plain data
(dicts, lists, numbers, strings, as JSON or msgpack decode it), into the next version's. Reading
applies the steps in order up to the current version, then decodes into the current type. So an
old snapshot is upgraded, not refused and replayed, and an old event folds like a new one.

Kinds: an event's `type` tag (e.g. "ClaimSubmitted"), or "snapshot" for the allocator's snapshot.
Pure: no I/O; each step a small function with a test (tests/structure/test_upcast.py).
"""

from __future__ import annotations

from typing import Any, Callable

Step = Callable[[dict[str, Any]], dict[str, Any]]

_STEPS: dict[tuple[str, int], Step] = {}
# the current version of each kind that has ever had a step (kinds without one are at version 1)
CURRENT: dict[str, int] = {}
SNAPSHOT = "snapshot"
# the event types among them: while none, events decode directly (no upcasting on the hot path)
EVENT_KINDS: dict[str, int] = {}


def step(kind: str, from_version: int) -> Callable[[Step], Step]:
    """Register the function that upgrades `kind` from `from_version` to `from_version + 1`."""

    def register(function: Step) -> Step:
        key = (kind, from_version)
        if key in _STEPS:
            raise ValueError(f"{kind} already has an upcaster from version {from_version}")
        _STEPS[key] = function
        CURRENT[kind] = max(CURRENT.get(kind, 1), from_version + 1)
        if kind != SNAPSHOT:
            EVENT_KINDS[kind] = CURRENT[kind]
        return function

    return register


def current(kind: str) -> int:
    return CURRENT.get(kind, 1)


def upcast(kind: str, data: dict[str, Any], version: int, field: str = "v") -> dict[str, Any]:
    """`data` of `kind` at `version`, upgraded step by step to the current version (its version
    field, `field`, set to it). A version newer than this code knows, or a missing step, raises
    ValueError naming the kind and the version."""
    target = current(kind)
    if version > target:
        raise ValueError(f"{kind} version {version} is newer than this gpuledger reads ({target})")
    while version < target:
        function = _STEPS.get((kind, version))
        if function is None:
            raise ValueError(f"no upcaster for {kind} from version {version}")
        data = function(dict(data))
        version += 1
        data[field] = version
    return data


# --- the steps -----------------------------------------------------------------------------------
# Snapshot v1 -> v2: a claim's history was formatted lines ("12.000 allocated on n1 (gpuledger@1)");
# v2 keeps `trail` entries (at, kind, *details), formatted on read (ledger.state.trail_text), and
# the submit line comes from `submitted_at`. Lines of a known form become their entry (so `claim
# explain` and the placement lines read them as before); any other line is kept as text.

_V1_LINES: tuple[tuple[str, str], ...] = (
    ("allocated on ", "allocated"), ("bound on ", "bound"), ("released: ", "released"),
    ("evicted (", "evicted"), ("allocation void", "void"),
)


def _trail_entry(line: str) -> list | None:
    at_text, _, text = line.partition(" ")
    try:
        at = float(at_text)
    except ValueError:
        return [0.0, "text", line]
    if text == "submitted":
        return None
    for prefix, kind in _V1_LINES:
        if text.startswith(prefix):
            return [at, *_v1_details(kind, text[len(prefix):])] if kind != "void" else [at, "void"]
    return [at, "text", text]


def _v1_details(kind: str, rest: str) -> list:
    if kind == "allocated":  # "n1 (gpuledger@1)"
        node, _, policy = rest.partition(" (")
        return ["allocated", node, policy.removesuffix(")")]
    if kind == "evicted":  # "priority) for urgent"
        rule, _, beneficiary = rest.partition(") for ")
        return ["evicted", rule, beneficiary]
    return [kind, rest]


@step(SNAPSHOT, 1)
def _snapshot_history_to_trail(snapshot: dict[str, Any]) -> dict[str, Any]:
    claims = []
    for claim in snapshot.get("claims", []):
        claim = dict(claim)
        lines = claim.pop("history", None) or []
        claim["trail"] = [entry for line in lines if (entry := _trail_entry(line)) is not None]
        claims.append(claim)
    snapshot["claims"] = claims
    return snapshot
