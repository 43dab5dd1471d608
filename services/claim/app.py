"""The claim service: intake (request/reply and the durable intake subject), release, leases,
and the claim queries (get, list, explain), answered from its own fold of the log."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from schemas import commands as cmd
from schemas import events as ev
from schemas import subjects
from schemas import systems as sysmod
from schemas.outcomes import FINAL
from schemas.seed import CLAIM_WIRE
from schemas.types import ClaimSpec
from shared.commands import DomainError, batched_command, command
from shared.eventlog import AppendConflict
from shared.service import ServiceContext
from shared.telemetry import inject_headers

from ledger.cohorts import quota_of
from ledger.follower import Follower
from services.claim.intake import SYSTEMS_DURABLE, consume_intake, wait_intake_drained
from services.claim.intake_fence import SubmitFence
from services.claim.listing import page
from services.claim.lookup import Unresolved, claim_with_prefix
from services.claim.metrics import instrument
from services.claim.outcome_view import rejected_system
from services.claim.outcomes import OutcomeWriter
from services.claim.releases import ReleaseAppender
from services.claim.seed_api import SeedSubmitClaim, decode_submit_claim, in_seed_names
from services.claim.validation import ClaimInvalid, reserved_field, validate_claim
from services.claim.views import claim_view, explain_view, over_cap_note

log = logging.getLogger("gpuledger.claim")
ACTIVITY_EVERY_S = 1.0  # activity reports closer together than this are answered, not appended
RENEW_EVERY_S = 1.0  # renewals closer together than this (or a tenth of the lease) likewise
# Submit requests are answered side by side (SUBMIT_WORKERS at once), their appends one at a time;
# at most SUBMIT_WAITS of them wait for their claim's outcome at once, a submit asking to wait beyond
# that is answered at once: answered one at a time, one publisher's wait_seconds=3600 on a claim that
# stays pending held up every later submit for an hour (session 27, tests/outsider/test_submit_waits.py).
SUBMIT_WORKERS = 64
SUBMIT_WAITS = 48
QUEUE = "claim"  # the claim service's requests: each to one replica (register_handlers)
# A release request waits this long for others before they are appended together: below saturation
# each release came alone, one ledger message (read by every follower) a claim, 0.8 a claim at
# 300/s (docs/benchmarks.md, "Session 35, speed-cost"). Releases are off the allocation path; their
# answer comes this much later.
RELEASE_LINGER_S = 0.01
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


def _forbidden(message: str, field: str) -> DomainError:
    """A publishing system asked for what is not its own (schemas/systems.py)."""
    return DomainError(code="forbidden", message=message, field=field)


class ClaimService:
    def __init__(self, event_log, clock=time.time, systems: tuple[sysmod.System, ...] = ()):
        self.log = event_log
        self.clock = clock
        self.systems = {s.name: s for s in systems}  # publishing systems (schemas/systems.py)
        self.owners: dict[str, str] = {}  # claim id -> the system that submitted it (none: absent)
        # answers for claims, never places; once caught up, the collector leaves the oldest generation
        # alone (young-only refreezes: ledger/follower.py): its automatic full passes rescanned every
        # claim folded since the last freeze, 9 % of this service's CPU in `bench e2e --claims 20000`
        self.follower = Follower(event_log, places=False, collect_old=False)
        self.releases = ReleaseAppender(event_log, self.follower, clock)
        self.rejected: dict[str, ev.ClaimRejected] = {}  # intake refusals, by claim id
        # claims taken (by an intake consumer's batch or a submit request) and not folded yet, with
        # their systems: checked like the log's, since each appends on its own (session 33: one id
        # taken by two at once was appended twice; services/claim/intake.py)
        self.in_flight: dict[str, tuple[ClaimSpec, str]] = {}
        self.by_token: dict[str, str] = {}  # subject token -> claim id, for ids a token rewrites
        # one listener for the three notes below (refusals, subject tokens, owners): a listener is
        # called for every event folded, four or five per claim
        self.follower.listeners.append(self._remember)
        self.intake_drained = None  # async () -> None: set where the durable intake is consumed
        self.on_intake_batch = None  # (size) -> None: the intake batch size histogram, when served
        # every new claim's checks and append, in turn, fenced against every replica's (intake_fence.py)
        self.fence = SubmitFence(event_log, self.follower)
        # A claim appended off the fence after this replica started: a claim-service replica of a
        # version before session 34 runs beside it (a rolling update), and two claims of one id may
        # both be stored until it stops (docs/reliability.md, "Rolling updates"). Said, counted.
        self.unfenced_after: int | None = None  # the log's end at start (set by `build`)
        self.unfenced_submits = 0
        self.waiting = 0  # submit requests waiting for their outcome now
        # (kind, claim id) -> this service's clock when it last appended a renewal or activity
        # report: the throttles below compare times of this one clock (see `_recent`)
        self._appended: dict[tuple[str, str], float] = {}

    def _remember(self, seq: int, subject: str, event: ev.Event) -> None:
        kind = type(event)
        if kind is ev.ClaimSubmitted:
            if subject == subjects.SUBMITS:  # folded: this one's checks see it (intake_fence.py)
                self.fence.heard(seq)
            elif self.unfenced_after is not None and seq > self.unfenced_after:
                self._unfenced(seq, subject, event)
            self._remember_token(seq, subject, event)
            self._remember_owner(seq, subject, event)
        elif kind is ev.ClaimRejected:
            self._remember_rejections(seq, subject, event)

    def _unfenced(self, seq: int, subject: str, event: ev.Event) -> None:
        self.unfenced_submits += 1
        count = self.unfenced_submits
        if count & (count - 1) == 0:  # the 1st, 2nd, 4th, ...: loud, but no flood
            log.error("claim %s was appended unfenced on %s (seq %d; %d so far since this replica started): a "
                      "claim-service replica without the submit fence (before session 34) is running beside "
                      "this one, and one claim id may be stored twice until it stops: replace the claim "
                      "replicas together (docs/reliability.md, \"Rolling updates\")",
                      event.claim.claim_id, subject, seq, count)

    def _remember_rejections(self, seq: int, subject: str, event: ev.Event) -> None:
        if isinstance(event, ev.ClaimRejected) and event.claim_id:
            self.rejected[event.claim_id] = event

    def _remember_owner(self, seq: int, subject: str, event: ev.Event) -> None:
        # the first submit of an id is the claim (the fold ignores a repeat: ledger.evolve)
        if isinstance(event, ev.ClaimSubmitted) and event.system:
            self.owners.setdefault(event.claim.claim_id, event.system)

    def owner(self, claim_id: str) -> str:
        """The system that submitted the claim ("" for ops and the shared `publisher` user)."""
        return self.owners.get(claim_id, "")

    def _check_system(self, spec: ClaimSpec, system: str) -> None:
        """A system's claim: the system declared here, the namespace one of its own."""
        if not system:
            return
        declared = self.systems.get(system)
        if declared is None:
            raise _forbidden(f"system {system!r} is not declared to the claim service "
                              "(GPULEDGER_SYSTEMS): its claims are refused until it is", "")
        if not declared.allows(spec.namespace):
            raise _forbidden(f"system {system!r} may not claim in namespace "
                              f"{spec.namespace!r}: its namespaces are {', '.join(declared.namespaces)}",
                              "claim.namespace")

    def check_owner(self, claim_id: str, system: str, verb: str) -> None:
        """A system acts on its own claims only; ops and the plain subjects (system "") on any."""
        if system and self.owner(claim_id) != system and claim_id in self.state.claims:
            raise _forbidden(f"system {system!r} may not {verb} claim {claim_id!r}: "
                              "it was not submitted by this system (a system may release, renew and "
                              "report activity only for its own claims)", "claim_id")

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
                pending: dict[str, ClaimSpec] | None = None, system: str = "",
                pending_owners: dict[str, str] | None = None,
                current_trace: dict[str, str] | None = None, internal: bool = False) -> ev.ClaimSubmitted | None:
        """The ClaimSubmitted to append, None for a repeat of a known claim, DomainError if
        invalid, outside the submitting `system`'s namespaces, or if the id is taken by a different
        claim or by another system's (in the log or in `pending`, whose systems are in
        `pending_owners`). A claim without a `trace` of its own carries the current one:
        `current_trace` when the caller has it already (the intake: one per drained batch, whose
        span is current for all its claims), else read here."""
        try:
            spec = validate_claim(spec)
        except ClaimInvalid as err:
            raise DomainError("invalid", err.message, f"claim.{err.field}")
        reserved = None if internal else reserved_field(spec)
        if reserved is not None:
            raise DomainError("invalid", reserved.message, f"claim.{reserved.field}")
        self._check_system(spec, system)
        existing = self.state.claims.get(spec.claim_id)
        if existing is None and pending is not None:
            existing_spec = pending.get(spec.claim_id)
            owner = (pending_owners or {}).get(spec.claim_id, "")
        else:
            existing_spec = existing.spec if existing is not None else None
            owner = self.owner(spec.claim_id)
        if existing_spec is not None and existing_spec != spec:
            raise DomainError("conflict", f"claim id {spec.claim_id} is already used by a different claim",
                              "claim.claim_id")
        if existing_spec is not None and owner != system:
            raise DomainError("conflict", f"claim id {spec.claim_id} is already used by a claim "
                              f"{'of another system' if owner else 'not submitted by a system'}: "
                              "choose another id (prefixing ids with the system's name avoids this)",
                              "claim.claim_id")
        if existing_spec is not None:
            return None
        other = self.shares_subject(spec.claim_id, pending)
        if other:
            raise DomainError("conflict", f"claim id {spec.claim_id} would share the subject "
                              f"{subjects.claim(spec.claim_id)} with claim {other} ('.' is written as '_'): "
                              "choose an id that differs in more than '.' and '_'", "claim.claim_id")
        if not trace:
            trace = dict(current_trace) if current_trace is not None else inject_headers()
        return ev.ClaimSubmitted(claim=spec, trace=trace, at=self.clock(), system=system)

    async def submit(self, spec: ClaimSpec, wait_seconds: float = 0.0, trace: dict | None = None,
                     system: str = "", internal: bool = False) -> dict:
        # checked against the whole log: before the fold has caught up (a restart), an id it has not
        # read yet looks free, and a claim reusing it (another system's, a different spec, an id
        # sharing its subject) was appended instead of refused (tests/outsider/test_intake_while_catching_up.py)
        await self.follower.caught_up.wait()
        appended, event, taken = None, None, None
        try:
            # checked against every claim before it, here (in flight) and in every replica (the
            # fence: services/claim/intake_fence.py), as it is appended
            async with self.fence.lock:
                expected = self.fence.tip
                while True:
                    taken = self.in_flight.get(spec.claim_id)  # an intake batch's, not folded yet
                    pending, owners = ({spec.claim_id: taken[0]}, {spec.claim_id: taken[1]}) if taken else (None, None)
                    event = self.prepare(spec, trace, pending=pending, system=system, pending_owners=owners,
                                         internal=internal)
                    if event is None:
                        break
                    self.in_flight[spec.claim_id] = (event.claim, system)
                    try:
                        appended = await self.fence.append(event, expected, msg_id=spec.claim_id,
                                                           headers=inject_headers())
                        break
                    except AppendConflict as conflict:  # another replica's claim came first: check again
                        self.in_flight.pop(spec.claim_id, None)
                        expected = await self.fence.caught_up(conflict)
            existing = event is None
            spec = event.claim if event is not None else spec
            if appended is not None:
                await self.follower.wait_for_seq(appended.seq)
            elif taken:  # the same claim, in an intake batch: answered once that is folded
                await self.follower.wait_until(lambda: spec.claim_id in self.state.claims, 30.0)
        finally:
            if event is not None:
                self.in_flight.pop(spec.claim_id, None)
        if wait_seconds > 0 and self.waiting < SUBMIT_WAITS:
            self.waiting += 1
            try:
                await self.follower.wait_until(lambda: self._settled(spec.claim_id), wait_seconds)
            finally:
                self.waiting -= 1
        return self.view(spec.claim_id) | {"duplicate": existing}

    def _settled(self, claim_id: str) -> bool:
        claim = self.state.claims.get(claim_id)
        return claim is not None and claim.status in SETTLED

    async def catch_up_to(self, *claim_ids: str) -> None:
        """Read your writes: a claim this service does not know yet may already be in the stream
        (published to the intake, or submitted through another replica a moment ago), so before
        answering "no claim" the view catches up to the stream's end.

        The log first, the intake only for what is still unknown then: a service just started
        answers before its fold has caught up, and the intake is not drained for up to its
        `ack_wait` (30 s) after a kill -9 of the last one, whose messages taken and not acked
        stay pending; waiting for the intake first made every release of a claim allocated
        before the restart wait out `wait_intake_drained`'s 5 s, and with it every release
        queued behind it, while the fleet stayed full (`bench chaos`, "stalled")."""
        if self._all_known(claim_ids):
            return
        # a start's catch-up first, however long (a big log's is longer than the 5 s below): before
        # it ends, a claim it has not read yet was answered "no claim", and a workload renewing
        # its lease heard that its claim was gone (session 31's outsider)
        await self.follower.caught_up.wait()
        await self.follower.wait_for_seq(await self.log.last_seq(), timeout=5.0)
        if self.intake_drained is None or self._all_known(claim_ids):
            return
        await self.intake_drained()  # published to the intake, not handled yet
        await self.follower.wait_for_seq(await self.log.last_seq(), timeout=5.0)

    def _all_known(self, claim_ids) -> bool:
        claims, rejected = self.state.claims, self.rejected
        return all(c in claims or c in rejected for c in claim_ids)

    async def release(self, claim_id: str, reason: str) -> dict:
        [answer] = await self.release_many([(claim_id, reason)])
        if isinstance(answer, DomainError):
            raise answer
        return answer

    async def release_many(self, releases: list[tuple]) -> list[dict | DomainError]:
        """Release each (claim, reason[, system]): the live ones with one append for all (an
        EventBatch on the claim service's batch subject when there are several), answered once it
        is folded. A system releases only its own claims. One answer per release, in order: the
        claim's view, or the DomainError for it."""
        await self.catch_up_to(*(claim_id for claim_id, *_rest in releases))  # once for all
        events: dict[str, ev.ClaimReleased] = {}
        refused: dict[int, DomainError] = {}
        for i, (claim_id, reason, *system) in enumerate(releases):
            try:
                self.check_owner(claim_id, system[0] if system else "", "release")
            except DomainError as err:
                refused[i] = err
                continue
            claim = self.state.claims.get(claim_id)
            if claim is not None and claim.status in ("pending", "allocated", "bound") and claim_id not in events:
                events[claim_id] = ev.ClaimReleased(claim_id=claim_id, reason=reason, at=self.clock())
        if events:
            appended = await self.releases.append(list(events.values()))
            await self.follower.wait_for_seq(appended.seq)
        return [refused.get(i) or self._released_view(claim_id, claim_id in events)
                for i, (claim_id, *_rest) in enumerate(releases)]

    def _released_view(self, claim_id: str, released_now: bool) -> dict | DomainError:
        try:
            claim = self._claim(claim_id)
        except DomainError as err:
            return err
        view = self.view(claim_id)
        return view if released_now else view | {"already": claim.status}

    async def renew(self, claim_id: str, system: str = "") -> dict:
        await self.catch_up_to(claim_id)
        claim = self._claim(claim_id)
        self.check_owner(claim_id, system, "renew")
        if not claim.holds_devices:
            raise DomainError("conflict", f"claim {claim_id} is {claim.status}: only an allocated claim "
                                          "can renew its lease", "claim_id")
        now, lease = self.clock(), claim.spec.lease_seconds
        # A renewal this soon after the last moves the lease's end by less than a tenth of it (a
        # second at most): answered, not appended, as activity reports, so a client renewing in a
        # loop does not grow the log (never purged, folded by every service) by one event a request
        every = min(RENEW_EVERY_S, lease / 10) if lease else RENEW_EVERY_S
        if not self._recent("renew", claim_id, claim.last_renewed, now, every):
            appended = await self.log.append(subjects.claim(claim_id), ev.LeaseRenewed(claim_id=claim_id, at=now))
            self._appended[("renew", claim_id)] = now
            await self.follower.wait_for_seq(appended.seq)
        return self.view(claim_id)

    async def activity(self, claim_id: str, system: str = "") -> dict:
        await self.catch_up_to(claim_id)
        claim = self._claim(claim_id)
        self.check_owner(claim_id, system, "report activity for")
        if claim.status in FINAL:  # as a renewal: the log is forever, an ended claim has no activity
            raise DomainError("conflict", f"claim {claim_id} is {claim.status}: activity is reported "
                                          "only for a live claim", "claim_id")
        now = self.clock()
        # Reports closer together than ACTIVITY_EVERY_S say nothing more for staleness (minutes):
        # answered, not appended, so a workload reporting in a loop does not grow the log with it
        if not self._recent("activity", claim_id, claim.last_activity, now, ACTIVITY_EVERY_S):
            appended = await self.log.append(subjects.claim(claim_id), ev.ClaimActivity(claim_id=claim_id, at=now))
            self._appended[("activity", claim_id)] = now
            await self.follower.wait_for_seq(appended.seq)  # the next report sees it (as renew does)
        return {"claim_id": claim_id}

    def _recent(self, kind: str, claim_id: str, logged: float, now: float, every: float) -> bool:
        """Whether a renewal (activity report) was stored less than `every` ago, so this one need not
        be: by the claim's time in the log when it is in this clock's recent past, or by this
        service's own last append. The log's time may be another host's (an allocation's is the
        allocator's): a claim service whose clock is behind the allocator's found every renewal
        'recent' and appended none, and the lease ran out while its holder renewed on time."""
        if 0.0 <= now - logged < every:
            return True
        appended = self._appended
        if len(appended) > 2 * len(self.state.claims) + 1024:  # forget ended claims now and then
            claims = self.state.claims
            self._appended = appended = {k: t for k, t in appended.items() if k[1] in claims}
        last = appended.get((kind, claim_id))
        return last is not None and 0.0 <= now - last < every

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
            view = claim_view(claim, self.state.units)
            return view | {"system": self.owners[claim_id]} if claim_id in self.owners else view
        rejected = self.rejected.get(claim_id)
        if rejected is not None:
            view = {"claim_id": claim_id, "status": "rejected", "end_reason": rejected.code,
                    "reasons": [{"code": r.code, "message": r.message} for r in rejected.reasons]}
            system = rejected_system(rejected)  # a system's refused claim: as its outcome says
            return view | {"system": system} if system else view
        raise DomainError("not-found", f"no claim {claim_id!r}", "claim_id")

    def explain(self, claim_id: str) -> dict:
        if claim_id in self.rejected and claim_id not in self.state.claims:
            return self.view(claim_id)
        claim = self._claim(claim_id)
        view = explain_view(claim, self.state.units, quota_of(self.state, claim.spec.namespace))
        over_cap = over_cap_note(claim, self.state)
        if over_cap:
            view["over_cap"] = over_cap
        return view | {"system": self.owners[claim_id]} if claim_id in self.owners else view

    def list(self, namespace: str, status: str, limit: int, cursor: str = "") -> tuple[list[dict], str]:
        return page(self.state.claims.values(), namespace, status, limit, cursor)


async def register_handlers(ctx: ServiceContext, service: ClaimService) -> None:
    b = ctx.broker

    # Each command on its plain subject (ops, the shared publisher) and on a system's own,
    # `<subject>.<system>`: only that system's NATS user may publish there (shared.nats_auth), so
    # the subject says which system asks (schemas/systems.py).
    def system_of(subject: str, verb: str) -> str:
        return sysmod.of_subject(subject, subjects.command(f"claim.{verb}"))

    async def submit(c: cmd.SubmitClaim, subject: str = ""):
        try:
            return cmd.ok(await service.submit(c.claim, c.wait_seconds, system=system_of(subject, "submit")))
        except DomainError as err:  # a seed-spelled claim hears its own field names
            raise in_seed_names(err, CLAIM_WIRE, "claim") if isinstance(c, SeedSubmitClaim) else err

    async def release_many(commands: list[tuple[cmd.ReleaseClaim, str]]) -> list[cmd.Reply]:
        answers = await service.release_many([(c.claim_id, c.reason, system_of(subject, "release"))
                                              for c, subject in commands])
        return [cmd.fail(a.code, a.message, a.field) if isinstance(a, DomainError) else cmd.ok(a)
                for a in answers]

    async def renew(c: cmd.RenewLease, subject: str = ""):
        return cmd.ok(await service.renew(c.claim_id, system_of(subject, "renew")))

    async def activity(c: cmd.ReportActivity, subject: str = ""):
        return cmd.ok(await service.activity(c.claim_id, system_of(subject, "activity")))

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

    # One queue group: each request is answered by one replica, as by a single claim service. Without
    # it every replica handled every request (two of them: each submit checked and appended twice,
    # each renewal and activity report appended twice, every query answered twice).
    q = QUEUE
    for suffix in ("", ".*"):
        command(b, subjects.command("claim.submit") + suffix, cmd.SubmitClaim, submit,
                decode=decode_submit_claim, with_subject=True, max_workers=SUBMIT_WORKERS, queue=q)
        command(b, subjects.command("claim.renew") + suffix, cmd.RenewLease, renew, with_subject=True, queue=q)
        command(b, subjects.command("claim.activity") + suffix, cmd.ReportActivity, activity, with_subject=True,
                queue=q)
    command(b, subjects.query("claim.get"), cmd.GetClaim, get, queue=q)
    command(b, subjects.query("claim.explain"), cmd.GetClaim, explain, queue=q)
    command(b, subjects.query("claim.list"), cmd.ListClaims, list_claims, queue=q)
    command(b, subjects.query("claim.resolve"), cmd.GetClaim, resolve, queue=q)
    command(b, subjects.query("cluster.summary"), cmd.Query, lambda _: _summary(service), queue=q)
    # releases come one per claim at the claims' rate: answered a batch at a time, one append each
    for suffix in ("", ".*"):
        await batched_command(ctx.nc, subjects.command("claim.release") + suffix, cmd.ReleaseClaim, release_many,
                              ctx.spawn, with_subject=True, queue=q, linger_s=RELEASE_LINGER_S)


async def _summary(service: ClaimService):
    s = service.state
    by_status: dict[str, int] = {}
    for claim in s.claims.values():
        by_status[claim.status] = by_status.get(claim.status, 0) + 1
    return cmd.ok({"last_seq": s.last_seq, "caught_up": service.follower.caught_up.is_set(), "nodes": len(s.nodes),
                   "nodes_ready": sum(1 for n in s.nodes.values() if n.schedulable),
                   "devices": len(s.units), "claims": by_status, "pending": len(s.pending)})


async def _once_caught_up(service: ClaimService, consume) -> None:
    """The intake is taken once the fold has read the log as it was at start: a claim is checked
    against every claim before it, and a refusal lands on a claim's subject only when no claim has
    that id. Taken before, a malformed payload naming a pending claim's id (another namespace's)
    was refused on that claim's subject, which ended the claim (session 31's outsider)."""
    try:
        await service.follower.caught_up.wait()
    except BaseException:
        consume.close()
        raise
    await consume


async def build(ctx: ServiceContext) -> None:
    service = ClaimService(ctx.log, systems=ctx.settings.systems)
    ctx.claims = service  # type: ignore[attr-defined]  # for in-process tests
    service.unfenced_after = await ctx.log.last_seq()  # claims off the fence before: history
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
    ctx.spawn(writer.renew_forever(), "claim-outcomes-lease")  # one replica writes outcomes at a time
    ctx.on_stop.append(writer.stop)
    js = ctx.nc.jetstream()
    service.intake_drained = lambda: wait_intake_drained(js)
    ctx.spawn(_once_caught_up(service, consume_intake(js, service)), "claim-intake")
    # the systems' own intake subjects (gpu.intake.claim.<system>): a consumer of their own, as a
    # work-queue stream's consumers may not overlap (and one of several filters needs nats 2.10)
    ctx.spawn(_once_caught_up(service, consume_intake(js, service, subject=f"{subjects.INTAKE_CLAIMS}.*",
                                                      durable=SYSTEMS_DURABLE)), "claim-intake-systems")
    if ctx.settings.kube_controller:  # GpuClaim objects on a cluster (off by default)
        from services.claim.kube_loop import run as run_kube

        ctx.spawn(run_kube(service), "claim-kube")

