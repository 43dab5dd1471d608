"""Each claim's outcome subject is found once, when its first outcome is written, not at every write
(services/claim/outcomes.py: a claim's system never changes; the subject is a regular-expression
check of the id and a string built, about 1,500 instructions of the writer's ~13,500 per outcome:
docs/benchmarks.md, "Session 34, speed-cost"). Pure: the writer's fold and build, no NATS."""

from __future__ import annotations

from ledger.evolve import evolve
from ledger.state import State
from schemas import events as ev
from schemas import subjects
from schemas.types import Grant
from services.claim import outcomes
from services.claim.outcomes import OutcomeWriter
from tests.quota.builders import claim, node


def _allocation(claim_id: str, gpu: int, at: float) -> ev.DecisionBatch:
    grant = Grant(node="n1", uuid=f"n1-gpu{gpu}", index=gpu, memory_mib=1024)
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node="n1", grants=[grant], at=at)], at=at)


class _Client:
    def new_inbox(self) -> str:
        return "_INBOX.test"

    def jetstream(self):
        return self


class _Service:
    def __init__(self, owners: dict[str, str]):
        self.state, self.rejected, self.owners = State(), {}, owners

    def owner(self, claim_id: str) -> str:
        return self.owners.get(claim_id, "")


def _written(writer: OutcomeWriter, service: _Service, events: list) -> list[tuple[str, str]]:
    """Fold each event, note it, build what it changed: (claim, subject) of each outcome written."""
    out = []
    for seq, event in enumerate(events, start=1):
        evolve(service.state, event, seq)
        for member in ev.flatten(event):
            writer.note(seq, "gpu.evt.x", member)
        out += [(claim_id, subject) for claim_id, subject, _data, _seq, _at in writer._build(writer.dirty)]
        writer.dirty = {}
    return out


def test_a_claims_outcome_subject_is_found_once_for_all_its_writes(monkeypatch):
    found, outcome_subject = [], subjects.outcome

    def counting(claim_id: str, system: str = "") -> str:
        found.append(claim_id)
        return outcome_subject(claim_id, system)

    monkeypatch.setattr(outcomes.subjects, "outcome", counting)
    service = _Service({"c-sys": "billing"})
    writer = OutcomeWriter(_Client(), service, clock=lambda: 0.0)
    written = _written(writer, service, [
        node("n1", 2), claim("c-1", at=2.0), claim("c-sys", at=2.0),
        _allocation("c-1", 0, at=3.0), _allocation("c-sys", 1, at=3.0),
        ev.ClaimReleased(claim_id="c-1", at=4.0), ev.ClaimReleased(claim_id="c-sys", at=4.0)])
    monkeypatch.undo()
    assert written == [("c-1", subjects.outcome("c-1")), ("c-sys", subjects.outcome("c-sys", "billing")),
                       ("c-1", subjects.outcome("c-1")), ("c-sys", subjects.outcome("c-sys", "billing"))]
    assert sorted(found) == ["c-1", "c-sys"]  # once each, for two writes each
