"""Upcasters: an older snapshot or event is upgraded on read by its registered steps, one test per
step (snapshot v1 -> v2, the real one), and the mechanism for events (a step registered here)."""

from __future__ import annotations

import msgspec
import pytest

from schemas import events as ev
from schemas import upcast
from ledger.digest import digest
from ledger.snapshot import SNAPSHOT_VERSION, from_snapshot, to_snapshot
from tests.fleet import Ledger, claim, h100_node


def lived_ledger() -> Ledger:
    ledger = Ledger()
    ledger.append(h100_node("h0"))
    ledger.append(claim("kept", gpus=2, models=["H100"]), claim("gone", gpus=1, models=["H100"]))
    ledger.decide(1.0)
    ledger.append(ev.ClaimBound(claim_id="kept", node="h0", env={"CUDA_VISIBLE_DEVICES": "0,1"}, at=2.0),
                  ev.ClaimReleased(claim_id="gone", reason="done", at=3.0))
    ledger.append(claim("low", gpus=6, models=["H100"], priority=-1, at=4.0))
    ledger.decide(4.0)
    ledger.append(claim("urgent", gpus=6, models=["H100"], priority=5, at=5.0))
    ledger.decide(5.0)
    return ledger


def as_version_1(snapshot: bytes) -> bytes:
    """The same snapshot as version 1 wrote it: each claim's history as formatted lines."""
    raw = msgspec.msgpack.decode(snapshot)
    state = from_snapshot(snapshot)
    raw["version"] = 1
    for claim_data in raw["claims"]:
        claim_data.pop("trail")
        claim_data["history"] = state.claims[claim_data["spec"]["claim_id"]].history
    return msgspec.msgpack.encode(raw)


def test_snapshot_version_1_is_upgraded_not_refused():
    ledger = lived_ledger()
    current = to_snapshot(ledger.state)
    old = as_version_1(current)
    assert msgspec.msgpack.decode(old)["version"] == 1 and SNAPSHOT_VERSION == 2
    upgraded, expected = from_snapshot(old), from_snapshot(current)
    assert digest(upgraded) == digest(expected)
    for claim_id, claim in expected.claims.items():
        assert upgraded.claims[claim_id].history == claim.history
    assert [e[1] for e in upgraded.claims["low"].trail] == ["allocated", "evicted"]


def test_a_version_1_line_of_no_known_form_is_kept_as_text():
    raw = {"claims": [{"history": ["1.000 submitted", "2.500 something older gpuledgers wrote"]}]}
    [claim_data] = upcast.upcast("snapshot", raw, 1, field="version")["claims"]
    assert claim_data["trail"] == [[2.5, "text", "something older gpuledgers wrote"]]


def test_a_snapshot_newer_than_this_code_is_refused_by_name():
    raw = msgspec.msgpack.decode(to_snapshot(lived_ledger().state))
    raw["version"] = SNAPSHOT_VERSION + 1
    raw["claims"] = "a shape this code does not know"
    with pytest.raises(ValueError, match="snapshot version 3 is newer"):
        from_snapshot(msgspec.msgpack.encode(raw))


@pytest.fixture
def activity_v2(monkeypatch):
    """A step as a breaking change would add one: ClaimActivity v1 named the claim `claim`."""
    def rename(data: dict) -> dict:
        data["claim_id"] = data.pop("claim")
        return data

    monkeypatch.setitem(upcast._STEPS, ("ClaimActivity", 1), rename)
    monkeypatch.setitem(upcast.CURRENT, "ClaimActivity", 2)
    monkeypatch.setitem(upcast.EVENT_KINDS, "ClaimActivity", 2)


def test_an_older_event_is_upgraded_on_read_also_inside_a_batch(activity_v2):
    old = {"type": "ClaimActivity", "v": 1, "claim": "c-1", "at": 5.0}
    assert ev.decode_event(msgspec.json.encode(old)) == ev.ClaimActivity(claim_id="c-1", at=5.0, v=2)
    batch = {"type": "EventBatch", "events": [old, {"type": "ClaimActivity", "v": 2, "claim_id": "c-2"}]}
    members = ev.decode_event(msgspec.json.encode(batch)).events
    assert [(m.claim_id, m.v) for m in members] == [("c-1", 2), ("c-2", 2)]


def test_an_event_newer_than_this_code_is_refused_by_name(activity_v2):
    with pytest.raises(ValueError, match="ClaimActivity version 3 is newer"):
        ev.decode_event(msgspec.json.encode({"type": "ClaimActivity", "v": 3, "claim_id": "c"}))


def test_every_registered_step_leads_to_the_current_version():
    for kind, version in upcast.CURRENT.items():
        assert all((kind, v) in upcast._STEPS for v in range(1, version)), kind
