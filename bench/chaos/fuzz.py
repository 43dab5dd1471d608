"""Hostile input mixed into a chaos run: payloads no claim decodes from, published to the intake,
and events forged on subjects their type does not belong on, published to the log.

Each bad payload has a kind (the fault class it stands for) so the report can say which kinds the
stack refused cleanly. Forged events are built so a fold that believes them does harm the checker
sees (a decision outside the decision subject, a binding no allocation backs), while the checker
itself believes decisions only from the decision subject.
"""

from __future__ import annotations

import random

import msgspec

from schemas import events as ev
from schemas import subjects
from schemas.types import Grant

MESSAGE_LIMIT = 1024 * 1024  # nats-server's default max_payload


def _deep(depth: int) -> bytes:
    return b'{"claim_id":"deep","namespace":"ns","labels":' + b"[" * depth + b"]" * depth + b"}"


def bad_intake_payloads(run: str, rng: random.Random) -> list[tuple[str, bytes]]:
    """(kind, payload) for the intake subject: each a message a claim service must refuse once,
    with a reason, and never be stalled or crashed by."""
    tag = f"{run}-bad{rng.randrange(10**6)}"
    huge_labels = {f"k{i}": "v" * 60 for i in range(12_000)}  # about 0.9 MB: under the limit
    return [
        ("invalid-utf8", b'{"claim_id":"' + tag.encode() + b'-u","namespace":"ns\xff\xfe"}'),
        ("invalid-utf8-bare", b"\xc3\x28\xa0\xa1"),
        ("deep-nesting", _deep(1000)),
        ("deeper-nesting", _deep(20_000)),
        ("huge", msgspec.json.encode({"claim_id": f"{tag}-h", "namespace": "ns", "labels": huge_labels})),
        ("wrong-types", msgspec.json.encode({"claim_id": f"{tag}-t", "namespace": 7, "gpus": "two"})),
        ("not-an-object", b"[1,2,3]"),
        ("not-json", b"claim please"),
        ("empty", b""),
        ("float-limit", msgspec.json.encode({"claim_id": f"{tag}-f", "namespace": "ns",
                                             "limit_vram_gib": 1e307})),
        ("memory-limit", msgspec.json.encode({"claim_id": f"{tag}-m", "namespace": "ns",
                                              "gpu_memory_gib": 1.7e308, "gpus": 1})),
        ("trailing-newline-name", msgspec.json.encode({"claim_id": f"{tag}-n", "namespace": "ns\n"})),
        ("unknown-field", msgspec.json.encode({"claim_id": f"{tag}-k", "namespace": "ns", "root": True})),
    ]


def forged_events(run: str, node: str, device: str) -> list[tuple[str, str, bytes]]:
    """(kind, subject, payload) to publish straight to the log: events whose type does not belong
    on the subject they arrive on (a writer with no right to them). No forged binding: the checker
    cannot tell it from an agent's, and would count it as an agent binding a void grant."""
    fake = f"{run}-forged"
    grant = Grant(node=node, uuid=device, index=0, milli=1000)
    allocation = ev.ClaimAllocated(claim_id=fake, namespace="ns", node=node, grants=[grant])
    return [
        ("empty-decision-batch-on-claim-subject", subjects.claim(fake),
         ev.encode_event(ev.DecisionBatch(decisions=[]))),
        ("allocation-on-claim-subject", subjects.claim(fake),
         ev.encode_event(ev.DecisionBatch(decisions=[allocation]))),
        ("undecodable-event", subjects.claim(fake + "-x"), b'{"type":"NoSuchEvent","v":1}'),
    ]
