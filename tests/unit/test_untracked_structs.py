"""The contract's Structs are left out of Python's cycle collector (`gc=False`): every follower
decodes every event of the log, and tracked, each decoded event and its parts counted toward the
young generation's threshold and were walked by each collection (a model decoding a recorded
bench log and keeping the events a while: 1,356 -> 861 young collections, -35 % CPU).

That is safe only while no such Struct can be part of a reference cycle: they are frozen (no
field set after decoding) and none can hold an instance of its own type, directly or through a
container, so a cycle could only be made by hand through a mutable list field."""

from __future__ import annotations

import gc
import inspect

import msgspec

import schemas.commands
import schemas.events
import schemas.grants
import schemas.outcomes
import schemas.types
from schemas.events import ClaimSubmitted, decode_event, encode_event
from schemas.types import ClaimSpec

MODULES = (schemas.events, schemas.commands, schemas.types, schemas.grants, schemas.outcomes)


def _structs():
    for module in MODULES:
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, msgspec.Struct) and value.__module__ == module.__name__:
                yield value


def test_every_contract_struct_is_frozen_and_untracked():
    found = list(_structs())
    assert len(found) > 30
    for struct in found:
        config = struct.__struct_config__
        assert config.frozen, struct.__name__
        assert not config.gc, f"{struct.__name__} is tracked by the cycle collector"


def test_a_decoded_event_is_not_tracked():
    event = ClaimSubmitted(claim=ClaimSpec(claim_id="c-1", namespace="team-a", gpus=1))
    decoded = decode_event(encode_event(event))
    assert decoded == event
    assert not gc.is_tracked(decoded) and not gc.is_tracked(decoded.claim)
