"""ClaimOutcome: what became of one claim, as one complete message a publisher can read.

The claim service writes it to the stream GPULEDGER_OUTCOMES on `gpu.outcome.claim.<token>`, a
publishing system's claims on `gpu.outcome.system.<system>.<token>` (see `schemas.subjects.outcome`),
each time the claim's status or reasons change; the stream keeps the latest per claim. Unlike events, every field is always written (no omitted defaults), so a
reader needs nothing but this message. See docs/contract.md.
"""

from __future__ import annotations

from typing import Literal

import msgspec

STATUSES = ("pending", "allocated", "bound", "released", "rejected", "evicted", "expired", "lost")
FINAL = frozenset(("released", "rejected", "evicted", "expired", "lost"))
Status = Literal[STATUSES]


class OutcomeDevice(msgspec.Struct, gc=False, frozen=True, forbid_unknown_fields=True):
    """One device (or share of one) the claim holds."""

    uuid: str  # the card's UUID, or the MIG instance's (MIG-...)
    index: int  # the card's index on the node (a MIG instance: its parent card's)
    mig_index: int  # -1 for a whole card or a share of one
    mig_profile: str  # "" unless a MIG instance
    milli: int  # 1000 = the whole device
    memory_mib: int


class OutcomeReason(msgspec.Struct, gc=False, frozen=True, forbid_unknown_fields=True):
    code: str  # stable: see docs/contract.md for every code and whether waiting helps
    message: str
    count: int  # nodes or devices it applies to (ranking weight), 0 where it does not count
    # the claim's field a refusal is about (`gpus`, `models[0]`, `labels.team`); "" when none, or the
    # payload as a whole (not JSON). Added after v1 was published: a default, so older writers fit.
    field: str = ""


class ClaimOutcome(msgspec.Struct, gc=False, tag_field="type", tag=True, frozen=True, kw_only=True,
                   forbid_unknown_fields=True):
    """The current outcome of one claim (the latest message on its subject is the current one)."""

    v: Literal[1]
    claim_id: str
    namespace: str  # "" for a claim the intake refused (it never entered the ledger)
    status: Status
    final: bool  # true: the claim has ended and this outcome will not change again
    node: str  # where it holds devices ("" unless allocated or bound)
    devices: list[OutcomeDevice]
    env: dict[str, str]  # what the workload starts with: CUDA_VISIBLE_DEVICES, ...
    reasons: list[OutcomeReason]  # why it waits (pending) or why it was refused (rejected)
    code: str  # why it ended: rejection code, eviction rule, lease-expired, node-lost, released
    message: str  # the same in words
    # the publishing system that submitted it ("" for the shared publisher, ops and a claim the
    # intake refused on the plain subject); its outcome is on that system's subjects. Added after
    # v1 was published: a default, so older writers fit. Kept before seq and at (the writer
    # compares outcomes without those two, the last fields).
    system: str = ""
    seq: int  # the ledger (stream GPULEDGER) sequence this outcome reflects: newer is larger
    at: float  # unix seconds of the event that changed it


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ClaimOutcome)


def encode_outcome(outcome: ClaimOutcome) -> bytes:
    return _encoder.encode(outcome)


def decode_outcome(data: bytes) -> ClaimOutcome:
    return _decoder.decode(data)
