"""A gang is its namespace's (session 29's outsider). Gang ids were global: every pending claim
naming a gang_id was a member, whatever its namespace or publisher, so anyone who knew (or guessed:
`job-1`, `train`) another team's gang id could hold that gang back for ever with one claim of their
own: a member no node could ever take (the whole gang waits `never-satisfiable`, parked), or a
`gang_size` of 4096 (the gang waits `gang-incomplete` for members that never come). Two teams that
merely picked the same id were placed all-or-nothing together."""

from __future__ import annotations

import pytest

from schemas import events as ev
from tests.fleet import Ledger, a100_mig_node, claim, h100_node


def allocated(decisions) -> set[str]:
    return {d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)}


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1"), a100_mig_node("a0"))
    return led


def team_a_gang() -> list[ev.ClaimSubmitted]:
    return [claim(f"a-{i}", "team-a", gpus=2, models=["H100"], gang_id="job", gang_size=2) for i in range(2)]


def test_a_claim_of_another_namespace_that_never_fits_does_not_hold_a_gang_back(ledger):
    ledger.append(claim("squat", "team-b", gpus=64, gang_id="job", gang_size=1), *team_a_gang())
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == {"a-0", "a-1"}
    assert ledger.state.claims["squat"].status == "pending"


def test_a_huge_gang_size_of_another_namespace_does_not_hold_a_gang_back(ledger):
    ledger.append(claim("squat", "team-b", gpus=1, gang_id="job", gang_size=4096), *team_a_gang())
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == {"a-0", "a-1"}
    [squat] = [d for d in decisions if getattr(d, "claim_id", "") == "squat"]
    assert squat.reasons[0].code == "gang-incomplete" and "1 of 256" in squat.reasons[0].message  # at most


def test_two_namespaces_with_one_gang_id_are_two_gangs(ledger):
    """team-b's gang of 2 completes on its own; team-a's waits for its second member."""
    ledger.append(claim("a-0", "team-a", gpus=1, gang_id="job", gang_size=2),
                  *[claim(f"b-{i}", "team-b", gpus=1, gang_id="job", gang_size=2) for i in range(2)])
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == {"b-0", "b-1"}
    [a0] = [d for d in decisions if getattr(d, "claim_id", "") == "a-0"]
    assert a0.reasons[0].code == "gang-incomplete" and "1 of 2" in a0.reasons[0].message


def test_a_gang_is_placed_at_most_its_size_and_at_most_256_at_once(ledger):
    """Session 29: every pending member was placed in the one batch, so 4,096 members (or any
    number past gang_size) made one DecisionBatch past NATS's 1 MB: the allocator's appends all
    failed and it exited, again at every start. Now the oldest gang_size members (at most 256)
    are the gang; the rest are a gang of their own in a later pass."""
    ledger.append(*[claim(f"m-{i}", gpus=0, cpu_milli=1, gang_id="wide", gang_size=2) for i in range(5)])
    assert allocated(ledger.decide(1.0)) == {"m-0", "m-1"}
    assert allocated(ledger.decide(2.0)) == {"m-2", "m-3"}
    [last] = [d for d in ledger.decide(3.0) if getattr(d, "claim_id", "") == "m-4"]
    assert last.reasons[0].code == "gang-incomplete"
    ledger.append(*[claim(f"b-{i}", gpus=0, cpu_milli=1, gang_id="big", gang_size=4096) for i in range(300)])
    decisions = ledger.decide(4.0)
    assert len({d for d in allocated(decisions) if d.startswith("b-")}) == 256
