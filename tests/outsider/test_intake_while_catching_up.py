"""A claim service that has not yet read the log takes nothing (session 31's outsider).

The claim service announced itself ready and took the intake, and submit requests, while its fold
was still reading the log (a restart: a million events take it 10-16 s). Every check of a claim
against the claims before it was made against the part read so far:
- a malformed payload naming a pending claim's id (another namespace's: ids are shared) was
  refused on that claim's subject, since no claim had that id yet as far as the service knew, and
  the fold then ended the pending claim as `rejected`;
- a different claim with a used id was taken (`ok`, the other claim's view) instead of `conflict`.
Now the intake and submits wait until the fold has read the log as it was at start; `status` says
"catching up" meanwhile.

The fold is held back here (the claim service's follower waits on a gate) so that the window is
as long as a big log's, not as short as an empty one's."""

from __future__ import annotations

import asyncio
import sys

import msgspec
import nats
import pytest

from ledger.follower import Follower
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.service.helpers import request, running

pytestmark = pytest.mark.timeout(120)
VICTIM = "victim-1"


async def _ask(nc, subject: str, body: dict, timeout: float = 60.0) -> dict:
    """A request, sent again while it reaches no one (a service just started, on a loaded machine:
    docs/contract.md says to), as the CLI does."""
    for _ in range(300):
        try:
            return await request(nc, subject, body, timeout=timeout)
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"nobody answered on {subject}")


@pytest.fixture
def held_fold(monkeypatch):
    """The followers started from now on wait for the gate before they read anything."""
    gate = asyncio.Event()
    run = Follower.run

    async def held(self, until=None):
        await gate.wait()
        await run(self, until)

    monkeypatch.setattr(Follower, "run", held)
    return gate


async def _victim_pending(nc, subject: str = "") -> None:
    """The victim claim in the log: on its own subject, where claims went before session 34 (a log
    a restarted service reads), or on `subject` (`gpu.evt.submit`, where every claim goes now)."""
    await ensure_streams(nc.jetstream())
    spec = ClaimSpec(claim_id=VICTIM, namespace="team-b", gpus=1, models=["H100"])
    await JetStreamEventLog(nc).append(subject or subjects.claim(VICTIM), ev.ClaimSubmitted(claim=spec, at=1.0),
                                       msg_id=VICTIM)


async def _status_text(url: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuledger_cli.main", "status", "--nats-url", url, "--timeout", "5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _err = await asyncio.wait_for(proc.communicate(), 120)
    return out.decode()


async def test_a_refusal_during_catch_up_does_not_end_a_claim_it_names(fresh_nats, held_fold):
    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    await _victim_pending(nc)
    async with running(fresh_nats.url, "claim"):
        hostile = {"claim_id": VICTIM, "namespace": "team-a", "gpus": -1}
        await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(hostile), headers={"Nats-Msg-Id": "hostile-1"})
        reuse = {"claim": {"claim_id": VICTIM, "namespace": "team-a", "gpus": 0, "cpu_milli": 100}}
        answer = asyncio.ensure_future(_ask(nc, subjects.command("claim.submit"), reuse))
        summary = await _ask(nc, subjects.query("cluster.summary"), {})
        assert summary["data"]["caught_up"] is False, summary
        assert "claim            up  read to seq 0 (1 behind)  CATCHING UP" in await _status_text(fresh_nats.url)
        await asyncio.sleep(1.0)  # room for the intake to be taken before the fold has read the log
        held_fold.set()
        reply = await answer
        assert reply["ok"] is False and reply["error"]["code"] == "conflict", reply
        await asyncio.wait_for(wait_intake_drained(js, timeout=60), 60)
        victim = await _ask(nc, subjects.query("claim.get"), {"claim_id": VICTIM})
        assert victim["ok"] and victim["data"]["status"] == "pending", victim
        assert victim["data"]["namespace"] == "team-b"
        # the malformed payload was refused all the same: on the dead-letter subject
        dead = await js.get_last_msg(subjects.STREAM, subjects.DEAD_LETTER + ".intake")
        assert msgspec.json.decode(dead.data)["code"] == "invalid"
        summary = await _ask(nc, subjects.query("cluster.summary"), {})
        assert summary["data"]["caught_up"] is True, summary
    await nc.close()


async def test_a_refusal_lands_only_on_a_subject_nothing_is_stored_on(fresh_nats):
    """The same refusal with the fold caught up but a claim of that id appended a moment ago and not
    yet folded (a submit request, the other intake consumer, another replica, racing): nats-server
    checks that no claim came on the submit subject since the fold's last (session 34; before, that
    the claim's own subject was empty)."""
    from services.claim.app import ClaimService
    from services.claim.intake import handle_intake_batch

    nc = await nats.connect(fresh_nats.url)
    await _victim_pending(nc, subjects.SUBMITS)
    log = JetStreamEventLog(nc)
    service = ClaimService(log)  # its fold not run: it has not read the claim, as in the race
    hostile = msgspec.json.encode({"claim_id": VICTIM, "namespace": "team-a", "gpus": -1})
    follow = asyncio.create_task(service.follower.run(until=0))  # it reads the claim once refused
    try:
        await handle_intake_batch(service, [(hostile, {}, 7, "")])
    finally:
        follow.cancel()
    on_subject = [type(s.event).__name__ async for s in log.subject_after(subjects.claim(VICTIM))]
    assert on_subject == []
    dead = await nc.jetstream().get_last_msg(subjects.STREAM, subjects.DEAD_LETTER + ".intake")
    assert msgspec.json.decode(dead.data)["claim_id"] == VICTIM
    # an id no claim has still hears its refusal on its own subject
    await handle_intake_batch(service, [(msgspec.json.encode({"claim_id": "fresh-1", "namespace": "team-a",
                                                              "gpus": -1}), {}, 8, "")])
    assert [type(s.event).__name__ async for s in log.subject_after(subjects.claim("fresh-1"))] == ["ClaimRejected"]
    await nc.close()


async def test_a_claim_not_read_yet_is_not_answered_no_claim(fresh_nats, held_fold):
    """A renewal or a lookup during a catch-up longer than read-your-writes' waits (10 s) was answered
    "no claim" (`not-found`): a workload renewing its lease heard its claim was gone. It waits for
    the catch-up now (the caller's own timeout bounds it)."""
    nc = await nats.connect(fresh_nats.url)
    await _victim_pending(nc)
    async with running(fresh_nats.url, "claim"):
        asked = [asyncio.ensure_future(_ask(nc, subjects.query(q), {"claim_id": VICTIM}))
                 for q in ("claim.get", "claim.explain")]
        renew = asyncio.ensure_future(_ask(nc, subjects.command("claim.renew"), {"claim_id": VICTIM}))
        await asyncio.sleep(11.0)  # past read-your-writes' two 5 s waits for the log's end
        held_fold.set()
        for reply in await asyncio.gather(*asked):
            assert reply["ok"] and reply["data"]["namespace"] == "team-b", reply
        reply = await renew  # pending: it holds no lease to renew, and says so
        assert reply["ok"] is False and reply["error"]["code"] == "conflict", reply
    await nc.close()


async def test_a_second_refusal_of_an_id_still_lands_after_the_first(fresh_nats):
    """A publisher sending a bad claim again (past the 120 s duplicate window: under another msg id
    here) hears the second refusal on the claim's subject, as before that check; a claim's subject
    still gets none."""
    from services.claim.app import ClaimService
    from services.claim.intake import _refuse_on_subject

    nc = await nats.connect(fresh_nats.url)
    await _victim_pending(nc, subjects.SUBMITS)
    log = JetStreamEventLog(nc)
    appended = log.append
    refusals = 0

    async def past_the_window(*args, msg_id=None, **kwargs):
        nonlocal refusals
        refusals += 1
        return await appended(*args, msg_id=f"{msg_id}-{refusals}", **kwargs)

    log.append = past_the_window
    service = ClaimService(log)
    follow = asyncio.create_task(service.follower.run(until=0))  # it reads the claim once refused
    try:
        for claim_id in ("twice-1", VICTIM):
            for n, code in enumerate(("invalid", "conflict")):
                await _refuse_on_subject(service, claim_id, ev.ClaimRejected(claim_id=claim_id, code=code, at=float(n)),
                                         {})
    finally:
        follow.cancel()
    assert [s.event.code async for s in log.subject_after(subjects.claim("twice-1"))] == ["invalid", "conflict"]
    assert [type(s.event).__name__ async for s in log.subject_after(subjects.claim(VICTIM))] == []
    await nc.close()
