"""The claim service: intake (request/reply and the durable intake subject), release, leases,
and the claim queries (get, list, explain), answered from its own fold of the log."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time

from schemas import commands as cmd
from schemas import events as ev
from schemas import subjects
from schemas.seed import CLAIM_WIRE
from schemas.types import ClaimSpec
from shared.commands import DomainError, batched_command, command
from shared.service import ServiceContext
from shared.telemetry import inject_headers

from ledger.follower import Follower
from services.claim.intake import consume_intake, wait_intake_drained
from services.claim.listing import page
from services.claim.lookup import Unresolved, claim_with_prefix
from services.claim.metrics import instrument
from services.claim.outcomes import OutcomeWriter
from services.claim.seed_api import SeedSubmitClaim, decode_submit_claim, in_seed_names
from services.claim.validation import ClaimInvalid, validate_claim
from services.claim.views import claim_view, explain_view

log = logging.getLogger("gpuledger.claim")
SETTLED = ("allocated", "bound", "rejected", "released", "evicted", "expired", "lost")


def _siblings(token: str) -> list[str] | None:
    """Every id with this subject token: each '_' may have been a '.'; None past 6 of them (64
    ids), where a scan of the batch is cheaper."""
    parts = token.split("_")
    if len(parts) > 7:
        return None
    ids = []
    for seps in itertools.product("_.", repeat=len(parts) - 1):
        ids.append(parts[0] + "".join(sep + part for sep, part in zip(seps, parts[1:])))
    return ids


class ClaimService:
    def __init__(self, event_log, clock=time.time):
        self.log = event_log
        self.clock = clock
        self.follower = Follower(event_log, places=False)  # answers for claims, never places
        self.rejected: dict[str, ev.ClaimRejected] = {}  # intake refusals, by claim id
        self.follower.listeners.append(self._remember_rejections)
        self.by_token: dict[str, str] = {}  # subject token -> claim id, for ids a token rewrites
        self.follower.listeners.append(self._remember_token)
        self.intake_drained = None  # async () -> None: set where the durable intake is consumed
        self.on_intake_batch = None  # (size) -> None: the intake batch size histogram, when served

    def _remember_rejections(self, seq: int, subject: str, event: ev.Event) -> None:
        if isinstance(event, ev.ClaimRejected) and event.claim_id:
            self.rejected[event.claim_id] = event

    def _remember_token(self, seq: int, subject: str, event: ev.Event) -> None:
        if isinstance(event, ev.ClaimSubmitted):
            claim_id = event.claim.claim_id
            if "." in claim_id or "_" in claim_id:  # the only ids two of which can share a token
                self.by_token.setdefault(subjects.claim(claim_id), claim_id)

    def shares_subject(self, claim_id: str, pending: dict[str, ClaimSpec] | None) -> str:
        """Another claim whose id becomes the same subject token (`col.a`, `col_a`), or "": in the
        log, or among the `pending` claims of the batch being drained."""
        token = claim_id.replace(".", "_")  # ids hold [A-Za-z0-9._:-]: only '.' is rewritten
        other = self.by_token.get(subjects.claim(claim_id), "")
        if not other and pending and "_" in token:
            siblings = _siblings(token)
            candidates = siblings if siblings is not None else list(pending)
            other = next((c for c in candidates if c != claim_id and c in pending
                          and c.replace(".", "_") == token), "")
        return other if other != claim_id else ""

    @property
    def state(self):
        return self.follower.state

    # --- commands ------------------------------------------------------------------------------

    def prepare(self, spec: ClaimSpec, trace: dict | None = None,
                pending: dict[str, ClaimSpec] | None = None) -> ev.ClaimSubmitted | None:
        """The ClaimSubmitted to append, None for a repeat of a known claim, DomainError if
        invalid or if the id is taken by a different claim (in the log or in `pending`)."""
        try:
            spec = validate_claim(spec)
        except ClaimInvalid as err:
            raise DomainError("invalid", err.message, f"claim.{err.field}")
        existing = self.state.claims.get(spec.claim_id)
        if existing is None and pending is not None:
            existing_spec = pending.get(spec.claim_id)
        else:
            existing_spec = existing.spec if existing is not None else None
        if existing_spec is not None and existing_spec != spec:
            raise DomainError("conflict", f"claim id {spec.claim_id} is already used by a different claim",
                              "claim.claim_id")
        if existing_spec is not None:
            return None
        other = self.shares_subject(spec.claim_id, pending)
        if other:
            raise DomainError("conflict", f"claim id {spec.claim_id} would share the subject "
                              f"{subjects.claim(spec.claim_id)} with claim {other} ('.' is written as '_'): "
                              "choose an id that differs in more than '.' and '_'", "claim.claim_id")
        return ev.ClaimSubmitted(claim=spec, trace=trace or inject_headers(), at=self.clock())

    async def submit(self, spec: ClaimSpec, wait_seconds: float = 0.0, trace: dict | None = None) -> dict:
        event = self.prepare(spec, trace)
        existing = event is None
        spec = event.claim if event is not None else spec
        if event is not None:
            appended = await self.log.append(subjects.claim(spec.claim_id), event, msg_id=spec.claim_id,
                                             headers=inject_headers())
            await self.follower.wait_for_seq(appended.seq)
        if wait_seconds > 0:
            await self.follower.wait_until(lambda: self._settled(spec.claim_id), wait_seconds)
        return self.view(spec.claim_id) | {"duplicate": existing}

    def _settled(self, claim_id: str) -> bool:
        claim = self.state.claims.get(claim_id)
        return claim is not None and claim.status in SETTLED

    async def catch_up_to(self, claim_id: str) -> None:
        """Read your writes: a claim this service does not know yet may already be in the stream
        (published to the intake, or submitted through another replica a moment ago), so before
        answering "no claim" the view catches up to the stream's end."""
        if claim_id in self.state.claims or claim_id in self.rejected:
            return
        if self.intake_drained is not None:  # published to the intake, not handled yet
            await self.intake_drained()
        await self.follower.wait_for_seq(await self.log.last_seq(), timeout=5.0)

    async def release(self, claim_id: str, reason: str) -> dict:
        [answer] = await self.release_many([(claim_id, reason)])
        if isinstance(answer, DomainError):
            raise answer
        return answer

    async def release_many(self, releases: list[tuple[str, str]]) -> list[dict | DomainError]:
        """Release each (claim, reason): the live ones with one append for all (an EventBatch on
        the claim service's batch subject when there are several), answered once it is folded.
        One answer per release, in order: the claim's view, or the DomainError for it."""
        for claim_id, _reason in releases:
            await self.catch_up_to(claim_id)
        events: dict[str, ev.ClaimReleased] = {}
        for claim_id, reason in releases:
            claim = self.state.claims.get(claim_id)
            if claim is not None and claim.status in ("pending", "allocated", "bound") and claim_id not in events:
                events[claim_id] = ev.ClaimReleased(claim_id=claim_id, reason=reason, at=self.clock())
        if events:
            appended = await self._append_releases(list(events.values()))
            await self.follower.wait_for_seq(appended.seq)
        return [self._released_view(claim_id, claim_id in events) for claim_id, _reason in releases]

    async def _append_releases(self, events: list[ev.ClaimReleased]):
        """One append for the batch; but a claim allocated and not bound yet has its release on
        its own subject, alone: its node agent appends the binding on condition that this subject
        has not moved (services/node_agent/binder.py), so no binding is stored after it. A
        release in the batch could be overtaken by such a binding. Pending and bound claims
        (most releases) stay batched."""
        alone = [e for e in events if self._allocated_unbound(e.claim_id)]
        batched = [e for e in events if not self._allocated_unbound(e.claim_id)]
        appended = list(await asyncio.gather(*(self._append_release(e) for e in alone)))
        if len(batched) == 1:
            appended.append(await self._append_release(batched[0]))
        elif batched:
            ids = "\n".join(e.claim_id for e in batched)
            appended.append(await self.log.append(
                subjects.INTAKE_BATCHES, ev.EventBatch(events=batched, at=self.clock()),
                msg_id="release-" + hashlib.sha256(ids.encode()).hexdigest()[:32]))
        return max(appended, key=lambda a: a.seq)

    async def _append_release(self, event: ev.ClaimReleased):
        return await self.log.append(subjects.claim(event.claim_id), event, msg_id=f"release-{event.claim_id}")

    def _allocated_unbound(self, claim_id: str) -> bool:
        claim = self.state.claims.get(claim_id)
        return claim is not None and claim.status == "allocated"

    def _released_view(self, claim_id: str, released_now: bool) -> dict | DomainError:
        try:
            claim = self._claim(claim_id)
        except DomainError as err:
            return err
        view = self.view(claim_id)
        return view if released_now else view | {"already": claim.status}

    async def renew(self, claim_id: str) -> dict:
        await self.catch_up_to(claim_id)
        claim = self._claim(claim_id)
        if not claim.holds_devices:
            raise DomainError("conflict", f"claim {claim_id} is {claim.status}: only an allocated claim "
                                          "can renew its lease", "claim_id")
        appended = await self.log.append(subjects.claim(claim_id),
                                         ev.LeaseRenewed(claim_id=claim_id, at=self.clock()))
        await self.follower.wait_for_seq(appended.seq)
        return self.view(claim_id)

    async def activity(self, claim_id: str) -> dict:
        await self.catch_up_to(claim_id)
        self._claim(claim_id)
        await self.log.append(subjects.claim(claim_id), ev.ClaimActivity(claim_id=claim_id, at=self.clock()))
        return {"claim_id": claim_id}

    # --- queries -------------------------------------------------------------------------------

    async def resolve(self, given: str) -> str:
        """The full id of the claim `given` names: its whole id or a prefix only it has."""
        await self.catch_up_to(given)  # an id submitted a moment ago counts, as for `get`
        if given in self.state.claims or given in self.rejected:
            return given
        try:
            return claim_with_prefix(given, itertools.chain(self.state.claims, self.rejected))
        except Unresolved as err:
            raise DomainError(err.code, err.message, "claim_id")

    def _claim(self, claim_id: str):
        claim = self.state.claims.get(claim_id)
        if claim is None:
            raise DomainError("not-found", f"no claim {claim_id!r}", "claim_id")
        return claim

    def view(self, claim_id: str) -> dict:
        claim = self.state.claims.get(claim_id)
        if claim is not None:
            return claim_view(claim, self.state.units)
        rejected = self.rejected.get(claim_id)
        if rejected is not None:
            return {"claim_id": claim_id, "status": "rejected", "end_reason": rejected.code,
                    "reasons": [{"code": r.code, "message": r.message} for r in rejected.reasons]}
        raise DomainError("not-found", f"no claim {claim_id!r}", "claim_id")

    def explain(self, claim_id: str) -> dict:
        if claim_id in self.rejected and claim_id not in self.state.claims:
            return self.view(claim_id)
        return explain_view(self._claim(claim_id), self.state.units)

    def list(self, namespace: str, status: str, limit: int, cursor: str = "") -> tuple[list[dict], str]:
        return page(self.state.claims.values(), namespace, status, limit, cursor)


async def register_handlers(ctx: ServiceContext, service: ClaimService) -> None:
    b = ctx.broker

    async def submit(c: cmd.SubmitClaim):
        try:
            return cmd.ok(await service.submit(c.claim, c.wait_seconds))
        except DomainError as err:  # a seed-spelled claim hears its own field names
            raise in_seed_names(err, CLAIM_WIRE, "claim") if isinstance(c, SeedSubmitClaim) else err

    async def release_many(commands: list[cmd.ReleaseClaim]) -> list[cmd.Reply]:
        answers = await service.release_many([(c.claim_id, c.reason) for c in commands])
        return [cmd.fail(a.code, a.message, a.field) if isinstance(a, DomainError) else cmd.ok(a)
                for a in answers]

    async def renew(c: cmd.RenewLease):
        return cmd.ok(await service.renew(c.claim_id))

    async def activity(c: cmd.ReportActivity):
        return cmd.ok(await service.activity(c.claim_id))

    async def get(c: cmd.GetClaim):
        await service.catch_up_to(c.claim_id)
        return cmd.ok(service.view(c.claim_id))

    async def explain(c: cmd.GetClaim):
        await service.catch_up_to(c.claim_id)
        return cmd.ok(service.explain(c.claim_id))

    async def resolve(c: cmd.GetClaim):
        return cmd.ok({"claim_id": await service.resolve(c.claim_id)})

    async def list_claims(c: cmd.ListClaims):
        claims, more = service.list(c.namespace, c.status, c.limit, c.cursor)
        return cmd.Reply(ok=True, data=claims, next=more)

    command(b, subjects.command("claim.submit"), cmd.SubmitClaim, submit, decode=decode_submit_claim)
    command(b, subjects.command("claim.renew"), cmd.RenewLease, renew)
    command(b, subjects.command("claim.activity"), cmd.ReportActivity, activity)
    command(b, subjects.query("claim.get"), cmd.GetClaim, get)
    command(b, subjects.query("claim.explain"), cmd.GetClaim, explain)
    command(b, subjects.query("claim.list"), cmd.ListClaims, list_claims)
    command(b, subjects.query("claim.resolve"), cmd.GetClaim, resolve)
    command(b, subjects.query("cluster.summary"), cmd.Query, lambda _: _summary(service))
    # releases come one per claim at the claims' rate: answered a batch at a time, one append each
    await batched_command(ctx.nc, subjects.command("claim.release"), cmd.ReleaseClaim, release_many, ctx.spawn)


async def _summary(service: ClaimService):
    s = service.state
    by_status: dict[str, int] = {}
    for claim in s.claims.values():
        by_status[claim.status] = by_status.get(claim.status, 0) + 1
    return cmd.ok({"last_seq": s.last_seq, "nodes": len(s.nodes),
                   "nodes_ready": sum(1 for n in s.nodes.values() if n.schedulable),
                   "devices": len(s.units), "claims": by_status, "pending": len(s.pending)})


async def build(ctx: ServiceContext) -> None:
    service = ClaimService(ctx.log)
    ctx.claims = service  # type: ignore[attr-defined]  # for in-process tests
    await register_handlers(ctx, service)
    instrument(ctx.metrics, service, ctx.log.last_seq)
    try:
        from services.claim.endpoints import register_endpoints
    except ImportError:  # serverless endpoints are optional in a trimmed build
        register_endpoints = None
    if register_endpoints is not None:
        await register_endpoints(ctx)
        from services.claim.slots import register_slots

        await register_slots(ctx)
    writer = OutcomeWriter(ctx.nc, service)
    service.follower.listeners.append(writer.note)
    ctx.claim_outcomes = writer  # type: ignore[attr-defined]  # for in-process tests
    ctx.spawn(service.follower.run(), "claim-follow")
    ctx.spawn(writer.run(), "claim-outcomes")
    ctx.spawn(writer.refresh_forever(), "claim-outcomes-refresh")
    ctx.on_stop.append(writer.stop)
    js = ctx.nc.jetstream()
    service.intake_drained = lambda: wait_intake_drained(js)
    ctx.spawn(consume_intake(js, service), "claim-intake")
    if ctx.settings.kube_controller:  # GpuClaim objects on a cluster (off by default)
        from services.claim.kube_loop import run as run_kube

        ctx.spawn(run_kube(service), "claim-kube")

