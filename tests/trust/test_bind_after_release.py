"""No binding stored after its claim's release (issue 16), on a real nats-server: the agent's
append is conditional on the claim's own subject, so a release appended between the agent's
look at its record and its append makes JetStream refuse the binding: nothing stored, no
workload started, and the claim is not bound later either."""

from __future__ import annotations

import pytest

from schemas import subjects
from schemas.events import ClaimBound, ClaimReleased, LeaseRenewed
from shared.eventlog import AppendConflict
from shared.jetstream import JetStreamEventLog

from tests.trust.binding_race import NODE, binder_on, record
from tests.trust.binding_race import nc  # noqa: F401 (a fixture: the client these tests share)


class ReleasedWhileLooking(JetStreamEventLog):
    """Appends the claim's release right after the agent read its claim's subject: the race."""

    def __init__(self, nc, claim_id: str):
        super().__init__(nc)
        self.claim_id, self.released = claim_id, False

    async def last_subject_seq(self, subject: str, direct: bool = False) -> int:
        seq = await super().last_subject_seq(subject, direct)
        if subject == subjects.claim(self.claim_id) and not self.released:
            self.released = True
            await self.append(subject, ClaimReleased(claim_id=self.claim_id, at=2.0))
        return seq


async def bindings(log) -> list[str]:
    return [s.event.claim_id async for s in log.subject_after(subjects.node_bindings(NODE))
            if isinstance(s.event, ClaimBound)]


async def test_a_release_between_the_look_and_the_append_refuses_the_binding(nc):
    log = ReleasedWhileLooking(nc, "gone")
    through = await log.last_seq()
    binder, started = binder_on(log)
    with pytest.raises(AppendConflict):
        await binder.apply(record(through, "gone", "kept"))
    assert log.released
    assert await bindings(log) == ["kept"] and started == ["kept"]
    await binder.apply(record(through, "gone", "kept"))  # the run loop's next look
    assert await bindings(log) == ["kept"] and started == ["kept"]
    assert "gone" in binder.ended


async def test_a_claim_released_after_its_record_is_never_bound(nc):
    log = JetStreamEventLog(nc)
    renewed = await log.append(subjects.claim("renewed"), LeaseRenewed(claim_id="renewed", at=1.0))
    through = renewed.seq
    await log.append(subjects.claim("gone"), ClaimReleased(claim_id="gone", at=2.0))
    await log.append(subjects.claim("renewed"), LeaseRenewed(claim_id="renewed", at=3.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", "renewed"))
    assert await bindings(log) == ["renewed"] and started == ["renewed"]
