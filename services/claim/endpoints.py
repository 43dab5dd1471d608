"""Serverless endpoints in the claim service (seed 000): commands, queries and the scaling loop.

An endpoint's workers are ordinary claims (`ClaimSpec.endpoint` = the endpoint, id
`<endpoint>-w<n>`), so the allocator places them like any claim and their status is the core
fold's. The loop asks the pure autoscaler what each endpoint needs and writes it down: first
`EndpointScaled`, fenced on the endpoint's subject (two claim-service replicas cannot both scale
the same step), then one `ClaimSubmitted` per new worker or `ClaimReleased` per idle one, each
with its claim id as message id so a retried step is stored once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from schemas import subjects
from schemas.catalogue import ANY_GROUP, CUDA_VERSIONS, GPU_GROUPS, cuda_conflict, expand_groups
from schemas.commands import (
    CreateEndpoint,
    DeleteEndpoint,
    GetEndpoint,
    ListEndpoints,
    Query,
    Reply,
    ReportEndpointLoad,
    UpdateEndpoint,
    fail,
    ok,
)
from schemas import events as ev
from schemas.seed import ENDPOINT_WIRE, seed_field, to_seed_endpoint
from schemas.types import MAX_LEASE_S, ClaimSpec, EndpointSpec
from ledger.follower import Follower
from ledger.state import State
from services.claim.releases import ReleaseAppender
from services.claim.availability import availability
from services.claim.heard import WORKER_SIGNS, HeardHere
from services.claim.intake_fence import SubmitFence
from services.claim.seed_api import (SeedCreateEndpoint, SeedUpdateEndpoint, decode_create_endpoint,
                                     decode_update_endpoint)
from services.claim.autoscaler import LIVE, EndpointView, Load, Scaling, Worker, decide_scaling
from shared.commands import command
from shared.eventlog import AppendConflict
from shared.service import ServiceContext

log = logging.getLogger("gpuledger.endpoints")
SCALER_TYPES = ("QUEUE_DELAY", "REQUEST_COUNT")
# a load report's numbers: far above any real queue, finite, and integers that msgpack can write
LOAD_LIMITS = {"queued": 2**31 - 1, "oldest_wait_s": float(MAX_LEASE_S), "requests_per_min": 1e12}
QUEUE = "claim-endpoints"


# --- validation (pure) -------------------------------------------------------------------------


class EndpointInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def validate_endpoint(spec: EndpointSpec) -> EndpointSpec:
    """Every rule of an endpoint; returns it normalised ('ANY' -> 'any'), raises naming the field."""
    groups = _groups(spec.gpu_groups)
    for i, version in enumerate(spec.cuda_versions):
        if version not in CUDA_VERSIONS:
            raise EndpointInvalid(f"cuda_versions[{i}]", f"{version} is not a valid CudaVersion; known: "
                                  f"{', '.join(CUDA_VERSIONS)}")
    _cuda_fits_groups(groups, spec.cuda_versions)
    if spec.scaler_type not in SCALER_TYPES:
        raise EndpointInvalid("scaler_type", f"{spec.scaler_type!r} is not one of {', '.join(SCALER_TYPES)}")
    if spec.scaler_value < 1:
        raise EndpointInvalid("scaler_value", "must be at least 1 (seconds of queue delay or "
                              "requests per minute per worker)")
    if not 1 <= spec.gpus_per_worker <= 8:
        raise EndpointInvalid("gpus_per_worker", "must be 1 to 8 (one machine)")
    if spec.workers_min < 0 or spec.workers_max < 1:
        raise EndpointInvalid("workers_max" if spec.workers_max < 1 else "workers_min",
                              "workers_min must be >= 0 and workers_max >= 1")
    if spec.workers_min > spec.workers_max:
        raise EndpointInvalid("workers_min", f"{spec.workers_min} is above workers_max {spec.workers_max}")
    if spec.idle_timeout_s < 0:
        raise EndpointInvalid("idle_timeout_s", "must be 0 or more seconds")
    return _replace(spec, gpu_groups=groups)


def _groups(groups: list[str]) -> list[str]:
    if not groups:
        raise EndpointInvalid("gpu_groups", "give at least one GPU group, or 'any'")
    if [g.lower() for g in groups] == [ANY_GROUP]:
        return [ANY_GROUP]
    for i, group in enumerate(groups):
        if group.lower() == ANY_GROUP:
            raise EndpointInvalid(f"gpu_groups[{i}]", "'any' already means every group: give it alone")
        if group not in GPU_GROUPS:
            # the seed's words (`invalid_gpu is not a valid GpuGroup`), then what is known
            raise EndpointInvalid(f"gpu_groups[{i}]", f"{group} is not a valid GpuGroup; known: any, "
                                  f"{', '.join(GPU_GROUPS)}")
        if group in groups[:i]:
            raise EndpointInvalid(f"gpu_groups[{i}]", f"{group} is listed twice")
    return list(groups)


def _cuda_fits_groups(groups: list[str], versions: list[str]) -> None:
    """A named group whose architecture runs none of the allowed CUDA versions can never serve."""
    if groups == [ANY_GROUP]:
        return
    for group in groups:
        conflict = cuda_conflict(group, versions)
        if conflict is not None:
            raise EndpointInvalid("cuda_versions", conflict)


def lock_image(spec: EndpointSpec, live_image: str, before: EndpointSpec | None = None) -> EndpointSpec:
    """The seed's LiveServerless: a live endpoint runs the operator's image and nothing else. Its
    spec gets that image; asking for another (on create or update) is an error that says so, as is
    turning an endpoint live or not on update (that decides whether the image is locked)."""
    if before is not None and before.live != spec.live:
        raise EndpointInvalid("live", f"endpoint {spec.name} is {'' if before.live else 'not '}live: "
                              "live cannot change on update (it decides whether the image is locked); "
                              "delete the endpoint and create it again")
    if not spec.live:
        return spec
    if spec.image and spec.image != live_image:
        raise EndpointInvalid("image", f"endpoint {spec.name} is live: its image is locked to {live_image} "
                              f"and cannot be overridden (asked for {spec.image!r}); leave image "
                              "(imageName) out, or use an endpoint that is not live")
    return _replace(spec, image=live_image)


def _replace(spec: EndpointSpec, **changes) -> EndpointSpec:
    import msgspec

    return msgspec.structs.replace(spec, **changes)


def worker_claim(spec: EndpointSpec, n: int) -> ClaimSpec:
    """The claim of the endpoint's n-th worker (ids are deterministic: a replay makes the same)."""
    groups = list(expand_groups(spec.gpu_groups))
    if spec.gpu_groups == [ANY_GROUP]:  # `any` means the groups that run an allowed CUDA version
        groups = [g for g in groups if cuda_conflict(g, spec.cuda_versions) is None]
    return ClaimSpec(claim_id=f"{spec.name}-w{n}", namespace=spec.namespace, gpus=spec.gpus_per_worker,
                     gpu_groups=groups, cuda_versions=list(spec.cuda_versions),
                     priority=spec.priority, endpoint=spec.name, workload="serverless-worker",
                     labels={"endpoint": spec.name, **({"image": spec.image} if spec.image else {})})


# --- the fold of endpoint events ---------------------------------------------------------------


@dataclass
class Endpoint:
    spec: EndpointSpec
    load: Load = Load()
    deleted: bool = False
    last_scaled: ev.EndpointScaled | None = None


# the events `EndpointBook.apply` reads off other subjects than the endpoints' own
_BOOK_EVENTS = frozenset((ev.EndpointCreated, ev.EndpointUpdated, ev.EndpointDeleted, ev.EndpointLoadReported,
                          ev.EndpointScaled, ev.ClaimSubmitted))


@dataclass
class EndpointBook:
    """Endpoints and their workers, folded from endpoint events and worker claim submissions."""

    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    workers: dict[str, list[str]] = field(default_factory=dict)  # endpoint -> claim ids, ever
    announced: dict[str, float] = field(default_factory=dict)  # worker id -> when a step added it
    announced_seq: dict[str, int] = field(default_factory=dict)  # worker id -> that step's seq
    releasing: set[str] = field(default_factory=set)  # workers a stored step releases
    subject_seqs: dict[str, int] = field(default_factory=dict)
    # endpoints scaled up by a step that named no workers (logs before EndpointScaled.added): their
    # workers are known only by the claims' `endpoint` field. Everywhere else a worker is what a
    # step announced: claim ids are shared by everyone, and a publisher's claim `chat-w1` with
    # `"endpoint": "chat"` was taken for the endpoint's worker (and released when it scaled down).
    legacy: set[str] = field(default_factory=set)
    by_token: dict[str, str] = field(default_factory=dict)  # claim subject -> first id ('.'/'_' ids)

    def apply(self, seq: int, subject: str, event: ev.Event) -> None:
        if subject.startswith("gpu.evt.endpoint."):
            self.subject_seqs[subject] = seq
        elif type(event) not in _BOOK_EVENTS:  # most of the log (decisions, releases): one look
            return
        if isinstance(event, ev.EndpointCreated):
            self.endpoints[event.endpoint.name] = Endpoint(event.endpoint)
        elif isinstance(event, ev.EndpointUpdated) and event.endpoint.name in self.endpoints:
            self.endpoints[event.endpoint.name].spec = event.endpoint  # load and last step stay
        elif isinstance(event, ev.EndpointDeleted) and event.name in self.endpoints:
            self.endpoints[event.name].deleted = True
        elif isinstance(event, ev.EndpointLoadReported) and event.name in self.endpoints:
            self.endpoints[event.name].load = Load(event.queued, event.oldest_wait_s, event.requests_per_min)
        elif isinstance(event, ev.EndpointScaled) and event.name in self.endpoints:
            self.endpoints[event.name].last_scaled = event
            if event.workers_after > event.workers_before and not event.added:
                self.legacy.add(event.name)
            for claim_id in event.added:
                self._add_worker(event.name, claim_id)
                self.announced[claim_id] = event.at
                self.announced_seq[claim_id] = seq
            self.releasing.update(event.released)
        elif isinstance(event, ev.ClaimSubmitted):
            claim_id = event.claim.claim_id
            if "." in claim_id or "_" in claim_id:  # the only ids two of which can share a token
                self.by_token.setdefault(subjects.claim(claim_id), claim_id)
            if event.claim.endpoint in self.legacy:
                self._add_worker(event.claim.endpoint, claim_id)

    def _add_worker(self, endpoint: str, claim_id: str) -> None:
        ids = self.workers.setdefault(endpoint, [])
        if claim_id not in ids:
            ids.append(claim_id)

    def active(self, name: str) -> Endpoint | None:
        endpoint = self.endpoints.get(name)
        return endpoint if endpoint is not None and not endpoint.deleted else None

    def next_worker_number(self, name: str) -> int:
        numbers = [int(c.rsplit("-w", 1)[1]) for c in self.workers.get(name, ()) if c.rsplit("-w", 1)[-1].isdigit()]
        return max(numbers, default=0) + 1

    def taken(self, claim_id: str, state: State) -> bool:
        """Another claim has this id, or one that shares its subject (`a.b-w1`, `a_b-w1`)."""
        return (claim_id in state.claims or claim_id in state.ended
                or self.by_token.get(subjects.claim(claim_id), claim_id) != claim_id)

    def free_worker_ids(self, name: str, count: int, state: State) -> list[str]:
        """The next `count` worker ids no claim has taken (a taken one is skipped for good)."""
        spec, ids, n = self.endpoints[name].spec, [], self.next_worker_number(name)
        while len(ids) < count:
            claim_id = worker_claim(spec, n).claim_id
            if not self.taken(claim_id, state):
                ids.append(claim_id)
            n += 1
        return ids

    def view(self, name: str, state: State, heard: HeardHere | None = None) -> EndpointView:
        """The endpoint and its workers; with `heard`, each worker's last sign of life is when this
        service heard it, on its own clock (services/claim/heard.py); without, the log's times
        (pure runs on one clock)."""
        endpoint = self.endpoints[name]
        return EndpointView(endpoint.spec, endpoint.load,
                            tuple(self._worker(state, c, name, heard) for c in self.workers.get(name, ())))

    def missing_claims(self, name: str, state: State) -> list[str]:
        """Workers a stored step added whose claim is not in the log (the writer stopped between)."""
        return [c for c in self.workers.get(name, ()) if c not in state.claims and c not in self.releasing]

    def _ours(self, claim, name: str) -> bool:
        endpoint = self.endpoints[name].spec
        return (claim.spec.endpoint == name and claim.spec.namespace == endpoint.namespace
                and claim.seq > self.announced_seq.get(claim.claim_id, 0))

    def _worker(self, state: State, claim_id: str, name: str, heard: HeardHere | None) -> Worker:
        claim = state.claims.get(claim_id)
        if claim is not None and not self._ours(claim, name):
            # another claim holds the id (submitted before the step announced it, or of another
            # endpoint or namespace): not this endpoint's worker, never released by it; the
            # autoscaler adds another worker in its place
            return Worker(claim_id, "taken", self._announced(claim_id, heard))
        if claim is None:  # announced by a step, claim not folded yet: it is starting
            status = "releasing" if claim_id in self.releasing else "pending"
            return Worker(claim_id, status, self._announced(claim_id, heard))
        status = "releasing" if claim_id in self.releasing and claim.status in LIVE else claim.status
        if heard is not None:
            return Worker(claim_id, status, heard.last(claim_id))
        return Worker(claim_id, status, max(claim.submitted_at, claim.allocated_at, claim.last_activity))

    def _announced(self, claim_id: str, heard: HeardHere | None) -> float:
        return heard.last(claim_id) if heard is not None else self.announced.get(claim_id, 0.0)


# --- the service -------------------------------------------------------------------------------


class Endpoints:
    def __init__(self, event_log, follower: Follower, clock=time.time, live_image: str = "runpod/tetra-rp:latest",
                 fence: SubmitFence | None = None):
        self.live_image = live_image
        self.log = event_log
        self.follower = follower
        # workers are claims: appended where every new claim is, fenced against every replica's
        # (the claim service's own fence, so its turns include these: intake_fence.py)
        self.fence = fence if fence is not None else SubmitFence(event_log, follower)
        self.clock = clock
        self.releases = ReleaseAppender(event_log, follower, clock)  # where any claim's release goes
        self.book = EndpointBook()
        follower.listeners.append(self.book.apply)
        # idle workers are judged by when this service heard them, on its own clock (heard.py)
        self.heard = HeardHere(lambda: self.clock(), lambda: self.follower.state, _is_worker, WORKER_SIGNS)
        follower.after_live.append(self.heard.hear)
        self._writing = asyncio.Lock()
        self._wake = asyncio.Event()

    @property
    def state(self) -> State:
        return self.follower.state

    async def catch_up(self) -> None:
        await self.follower.wait_for_seq(await self.log.last_seq())

    async def _append(self, subject: str, event: ev.Event, msg_id: str, fenced: bool = True) -> int:
        expected = self.book.subject_seqs.get(subject, 0) if fenced else None
        appended = await self.log.append(subject, event, msg_id=msg_id, expected_last_subject_seq=expected)
        await self.follower.wait_for_seq(appended.seq)
        return appended.seq

    # commands

    async def create(self, c: CreateEndpoint) -> Reply:
        seed = isinstance(c, SeedCreateEndpoint)  # answered in the names and shape it was sent in
        try:
            spec = lock_image(validate_endpoint(c.endpoint), self.live_image)
        except EndpointInvalid as err:
            return _invalid(err, seed)
        async with self._writing:
            await self.catch_up()
            existing = self.book.active(spec.name)
            if existing is not None:
                if existing.spec == spec:
                    return ok(_created(spec, False, seed))
                return fail("conflict", f"endpoint {spec.name} already exists with another spec; "
                            "delete it first", "endpoint.name")
            subject = subjects.endpoint(spec.name)
            other = next((n for n in self.book.endpoints if n != spec.name and self.book.active(n)
                          and subjects.endpoint(n) == subject), None)
            if other is not None:  # `ep.3` and `ep_3`: one subject, and their workers' ids would share one
                return fail("conflict", f"endpoint {spec.name} would share the subject {subject} with endpoint "
                            f"{other} ('.' is written as '_'): choose another name", "endpoint.name")
            try:
                await self._append(subject, ev.EndpointCreated(endpoint=spec, at=self.clock()),
                                   f"{subject}:{self.book.subject_seqs.get(subject, 0)}:create")
            except AppendConflict:
                return fail("conflict", f"endpoint {spec.name} changed while it was being created; retry")
        self._wake.set()
        return ok(_created(spec, True, seed))

    async def update(self, c: UpdateEndpoint) -> Reply:
        seed = isinstance(c, SeedUpdateEndpoint)
        try:
            spec = validate_endpoint(c.endpoint)
        except EndpointInvalid as err:
            return _invalid(err, seed)
        async with self._writing:
            await self.catch_up()
            existing = self.book.active(spec.name)
            if existing is None:
                return fail("not-found", f"no endpoint {spec.name!r}", "endpoint.name")
            try:
                spec = lock_image(spec, self.live_image, existing.spec)
            except EndpointInvalid as err:
                return _invalid(err, seed)
            if spec == existing.spec:
                return ok(_created(spec, False, seed) | {"updated": False})
            subject = subjects.endpoint(spec.name)
            try:
                await self._append(subject, ev.EndpointUpdated(endpoint=spec, at=self.clock()),
                                   f"{subject}:{self.book.subject_seqs.get(subject, 0)}:update")
            except AppendConflict:
                return fail("conflict", f"endpoint {spec.name} changed while it was being updated; retry")
        self._wake.set()
        return ok(_created(spec, False, seed) | {"updated": True})

    async def delete(self, c: DeleteEndpoint) -> Reply:
        async with self._writing:
            await self.catch_up()
            if self.book.active(c.name) is None:
                return fail("not-found", f"no endpoint {c.name!r}", "name")
            subject = subjects.endpoint(c.name)
            try:
                await self._append(subject, ev.EndpointDeleted(name=c.name, at=self.clock()),
                                   f"{subject}:{self.book.subject_seqs.get(subject, 0)}:delete")
            except AppendConflict:
                return fail("conflict", f"endpoint {c.name} changed while it was being deleted; retry")
            view = self.book.view(c.name, self.state)
            released = [w.claim_id for w in view.live]
            for claim_id in released:
                await self._release(claim_id, f"endpoint {c.name} deleted")
        return ok({"endpoint": c.name, "deleted": True, "released": released})

    async def report_load(self, c: ReportEndpointLoad) -> Reply:
        for name in ("queued", "oldest_wait_s", "requests_per_min"):
            if getattr(c, name) < 0:
                return fail("invalid", f"{name} must be 0 or more", name)
            if getattr(c, name) > LOAD_LIMITS[name]:  # stored in the log as it came, read by every fold
                return fail("invalid", f"{name} must be at most {LOAD_LIMITS[name]:g}", name)
        await self.catch_up()
        if self.book.active(c.name) is None:
            return fail("not-found", f"no endpoint {c.name!r}", "name")
        event = ev.EndpointLoadReported(name=c.name, queued=c.queued, oldest_wait_s=c.oldest_wait_s,
                                        requests_per_min=c.requests_per_min, at=self.clock())
        seq = (await self.log.append(subjects.endpoint(c.name), event)).seq
        await self.follower.wait_for_seq(seq)
        self._wake.set()
        return ok({"endpoint": c.name, "seq": seq})

    # queries

    async def get(self, c: GetEndpoint) -> Reply:
        await self.catch_up()
        if self.book.active(c.name) is None:
            return fail("not-found", f"no endpoint {c.name!r}", "name")
        return ok(self._describe(c.name))

    async def list(self, c: ListEndpoints) -> Reply:
        await self.catch_up()
        names = [n for n, e in self.book.endpoints.items() if not e.deleted
                 and (not c.namespace or e.spec.namespace == c.namespace)]
        return ok([self._describe(n) for n in names])

    def _describe(self, name: str) -> dict:
        import msgspec

        endpoint, view = self.book.endpoints[name], self.book.view(name, self.state)
        scaled = endpoint.last_scaled
        return {"spec": msgspec.to_builtins(endpoint.spec), "resource": to_seed_endpoint(endpoint.spec),
                "load": endpoint.load.__dict__,
                "workers": [{"claim_id": w.claim_id, "status": w.status} for w in view.live],
                "last_scaled": {"workers_before": scaled.workers_before, "workers_after": scaled.workers_after,
                                "reason": scaled.reason, "at": scaled.at} if scaled else None}

    # the scaling loop

    async def run_scaler(self, tick_s: float) -> None:
        """Scale every endpoint each tick, or at once when a load report or create arrives."""
        task = asyncio.current_task()
        while True:
            # A cancel that a library swallowed (turned into a timeout or a result) still shows in
            # `cancelling()`: honour it, or the loop would outlive stop_service.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            await self._tick_or_wake(tick_s)
            self._wake.clear()
            try:
                await self.scale_all()
            except Exception:  # an infrastructure hiccup: log it, try again next tick
                log.exception("scaling pass failed")

    async def _tick_or_wake(self, tick_s: float) -> None:
        # Not asyncio.wait_for: on 3.11 it can swallow a cancel that races the wake-up, and then
        # the loop outlives stop_service.
        waiter = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({waiter}, timeout=tick_s)
        finally:
            waiter.cancel()

    async def scale_all(self) -> list[Scaling]:
        done = []
        async with self._writing:
            await self.catch_up()
            self.heard.begin()
            self.heard.prune()
            for name in [n for n, e in self.book.endpoints.items() if not e.deleted]:
                await self._submit_claims(name, self.book.missing_claims(name, self.state))
                step = decide_scaling(self.book.view(name, self.state, self.heard), self.clock())
                if step.changes and await self._scale(name, step):
                    done.append(step)
        return done

    async def _scale(self, name: str, step: Scaling) -> bool:
        """Record the step fenced, then carry it out; False when another replica got there first."""
        subject = subjects.endpoint(name)
        expected = self.book.subject_seqs.get(subject, 0)
        added = self.book.free_worker_ids(name, step.add, self.state)
        event = ev.EndpointScaled(name=name, workers_before=step.before, workers_after=step.after,
                                  reason=step.reason, added=added, released=list(step.release),
                                  at=self.clock())
        try:
            await self._append(subject, event, f"{subject}:{expected}:scale")
        except AppendConflict:
            return False
        await self._submit_claims(name, added)
        for claim_id in step.release:
            await self._release(claim_id, f"endpoint {name} scaled down: {step.reason}")
        return True

    async def _submit_claims(self, name: str, claim_ids: list[str]) -> None:
        spec = self.book.endpoints[name].spec
        for claim_id in claim_ids:
            await self._submit_worker(worker_claim(spec, int(claim_id.rsplit("-w", 1)[1])))

    async def _submit_worker(self, claim: ClaimSpec) -> None:
        """A worker's claim, unless a claim with its id is in the fold: on the submit subject, on
        condition that no claim came there since this fold's last (another replica's worker or a
        client's claim with this id, not yet folded here: folded, then looked at again)."""
        fence, appended = self.fence, None
        async with fence.lock:
            expected = fence.tip
            while claim.claim_id not in self.state.claims and claim.claim_id not in self.state.ended:
                try:
                    appended = await fence.append(ev.ClaimSubmitted(claim=claim, at=self.clock()), expected,
                                                  msg_id=claim.claim_id)
                    break
                except AppendConflict as conflict:
                    expected = await fence.caught_up(conflict)
        if appended is not None:
            await self.follower.wait_for_seq(appended.seq)

    async def _release(self, claim_id: str, reason: str) -> None:
        """Where a client's release would go (its node's release subject while it may still be
        bound: on the claim's own subject, its binding could be stored after it)."""
        claim = self.state.claims.get(claim_id)
        if claim is None or claim.status not in ("pending", "allocated", "bound"):
            return  # ended meanwhile (released by its owner, preempted): nothing to release
        event = ev.ClaimReleased(claim_id=claim_id, reason=reason, by="endpoint-autoscaler", at=self.clock())
        appended = await self.releases.append([event])
        await self.follower.wait_for_seq(appended.seq)


def _is_worker(spec: ClaimSpec) -> bool:
    return bool(spec.endpoint)


def _invalid(err: EndpointInvalid, seed: bool) -> Reply:
    """The refusal, naming the field as the client spelled it (`endpoint.imageName` for the seed's)."""
    return fail("invalid", err.message, f"endpoint.{seed_field(err.field, ENDPOINT_WIRE) if seed else err.field}")


def _created(spec: EndpointSpec, created: bool, seed: bool) -> dict:
    """The reply of a create; a seed-spelled request also gets the endpoint back in the seed's
    shape (both dual fields filled), as the seed's API answers."""
    reply = {"endpoint": spec.name, "created": created}
    if seed:
        reply["resource"] = to_seed_endpoint(spec)
    return reply


async def register_endpoints(ctx: ServiceContext) -> Endpoints:
    """Add the endpoint handlers and the scaling loop to a claim service being built."""
    claims = getattr(ctx, "claims", None)
    follower = claims.follower if claims is not None else Follower(ctx.log, places=False)
    endpoints = Endpoints(ctx.log, follower, live_image=ctx.settings.live_image,
                          fence=claims.fence if claims is not None else None)
    ctx.endpoints = endpoints  # type: ignore[attr-defined]  # for in-process tests
    b = ctx.broker
    command(b, subjects.command("endpoint.create"), CreateEndpoint, endpoints.create, queue=QUEUE,
            decode=decode_create_endpoint)
    command(b, subjects.command("endpoint.update"), UpdateEndpoint, endpoints.update, queue=QUEUE,
            decode=decode_update_endpoint)
    command(b, subjects.command("endpoint.delete"), DeleteEndpoint, endpoints.delete, queue=QUEUE)
    command(b, subjects.command("endpoint.load"), ReportEndpointLoad, endpoints.report_load, queue=QUEUE)
    command(b, subjects.query("endpoint.get"), GetEndpoint, endpoints.get, queue=QUEUE)
    command(b, subjects.query("endpoint.list"), ListEndpoints, endpoints.list, queue=QUEUE)

    async def gpus(_: Query) -> Reply:  # live availability per model, for `gpuledger gpus`
        await endpoints.catch_up()
        return ok(availability(endpoints.state))

    command(b, subjects.query("gpus.availability"), Query, gpus, queue=QUEUE)
    if claims is None:  # on its own (tests): follow the log ourselves
        ctx.spawn(follower.run(), "endpoints-follow")
    if ctx.settings.endpoint_tick_s > 0:  # 0: no loop, scaling only through `scale_all` (tests)
        ctx.spawn(endpoints.run_scaler(ctx.settings.endpoint_tick_s), "endpoint-scaler")
    return endpoints
