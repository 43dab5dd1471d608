"""The quota service: quota definitions (validated), status, threshold alerts and drift reports.

It folds the whole log (the allocator's own fold for use, plus alerts, drift and observations;
see `view.py`), answers commands and the status query from that fold, and after each change
appends the alert and drift events the pure rules call for. Enforcement is not here: the
allocator checks quota in the same decision that grants the GPUs.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time

from schemas import commands as cmd
from schemas import events as ev
from schemas import subjects
from shared.commands import DomainError, command
from shared.eventlog import AppendConflict
from shared.service import ServiceContext
from shared.settings import Settings

from ledger import census
from ledger.cohorts import quota_source, tree_of
from ledger.follower import Follower
from shared.paced import SLOW_READER_LINGER_S
from shared.retry import TRANSIENT
from services.quota.alerts import alert_changes
from services.quota.drift import drift_changes
from services.quota.status import QuotaStatus, all_statuses, known_namespaces, namespace_status
from services.quota.writes import QuotaWrites
from services.quota.view import QuotaView, fold_own

log = logging.getLogger("gpuledger.quota")
# Alerts and drift are looked at again at most this often: they are about minutes of use, and a
# look after every folded batch (every claim, under load) cost more than the fold itself.
RECONCILE_EVERY_S = 0.25
# A node where a claim ended is judged for drift this long after the end (sooner when its agent
# reports again): the agent stops the claim's processes when its record drops the claim and shows
# that at its next usage look (every 3 s by default). Judged at once, every claim that was running
# at the node's last report looked like a process outliving its claim: a DriftDetected and a
# DriftCleared per released claim, 45 % of the log in `bench e2e`.
SETTLE_AFTER_END_S = 5.0
QUEUE = "quota"  # the quota service's requests: each to one replica
QUERY_WAIT_S = 2.0  # a query waits at most this long for the fold to read what is stored


class QuotaService(QuotaWrites):
    def __init__(self, event_log, settings: Settings, clock=time.time):
        self.log = event_log
        self.settings = settings
        self.clock = clock
        self.view = QuotaView()
        # reports use, never places; reads the log in bursts (alerts and drift are looked at 4x a second)
        # and leaves the oldest generation of objects to the follower's refreezes (ledger.follower);
        # bindings are never read: a bound claim holds what it held allocated, and nothing here
        # tells the two apart (0.3-0.6 messages per claim, each a kilobyte of environment to decode)
        self.follower = Follower(event_log, self.view.state, places=False, linger_s=SLOW_READER_LINGER_S,
                                 collect_old=False, unread=subjects.is_node_bindings)
        self.follower.listeners.append(self._folded)
        self.changed = asyncio.Event()
        self.dirty_nodes: set[str] = set()
        self.settle_after_end_s = SETTLE_AFTER_END_S
        # claims ended a moment ago -> (when, by this service's clock, to judge them; their node):
        # until then a process they brought is not reported as outliving them
        self.settling: dict[str, tuple[float, str]] = {}
        self._settle_order: list[tuple[float, str]] = []  # a heap of (when, claim) over `settling`
        self.events_appended = 0
        # the last sequence this fold has read on each subject the rules append to (a namespace's
        # quota subject, a node's drift subject): their appends are conditioned on it, so two quota
        # replicas (or one beside a quota command) never both store one alert or drift report
        self.subject_seqs: dict[str, int] = {}
        self.fenced_out = 0  # rule appends refused because another writer came first
        self.judged_through = 0  # the log position the last finished reconcile pass judged (tests wait on it)

    # --- the fold and the rules that append ----------------------------------------------------

    def _folded(self, seq: int, subject: str, event: ev.Event) -> None:
        fold_own(self.view, event)
        if type(event) in _NEITHER_ENDS_NOR_JUDGES:  # most of the log: one look, not six
            self.changed.set()
            return
        if subject.startswith(_RULE_SUBJECTS):
            self.subject_seqs[subject] = seq
        ended = self._ends(event)
        if ended:
            due = self.clock() + self.settle_after_end_s
            for claim_id, node in ended:
                self.settling[claim_id] = (due, node)
                heapq.heappush(self._settle_order, (due, claim_id))
        self.dirty_nodes.update(self._nodes_to_judge(event))
        self.changed.set()

    def _nodes_to_judge(self, event: ev.Event) -> list[str]:
        """Nodes whose drift this event may change now: observed again or allocated on."""
        if isinstance(event, ev.UsageObserved):
            return [event.node]
        if isinstance(event, ev.EventBatch):
            return [n for member in event.events for n in self._nodes_to_judge(member)]
        if isinstance(event, ev.DecisionBatch):
            return [d.node for d in event.decisions if isinstance(d, (ev.ClaimAllocated, ev.NodeLost))]
        return []

    def _ends(self, event: ev.Event) -> list[tuple[str, str]]:
        """(claim, node) of each claim this event ended on a node: its processes may outlive it,
        judged once its agent had time to stop them (`SETTLE_AFTER_END_S`), not at the next
        periodic report (a minute)."""
        if isinstance(event, ev.EventBatch):
            return [end for member in event.events for end in self._ends(member)]
        if isinstance(event, ev.ClaimReleased):
            return [(event.claim_id, n) for n in self._node_of(event.claim_id)]
        if isinstance(event, ev.DecisionBatch):
            return [(d.claim_id, n) for d in event.decisions
                    if isinstance(d, (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused))
                    for n in self._node_of(d.claim_id)]
        return []

    def _settled_now(self) -> set[str]:
        """Nodes of the ended claims whose settle time has come (they leave `settling`). Only those
        are looked at: at saturation thousands of claims settle at once, and every pass scanned
        them all."""
        now, order, settling = self.clock(), self._settle_order, self.settling
        nodes = set()
        while order and order[0][0] <= now:
            at, claim_id = heapq.heappop(order)
            entry = settling.get(claim_id)
            if entry is not None and entry[0] == at:  # else ended again since: a later entry
                del settling[claim_id]
                nodes.add(entry[1])
        return nodes

    def _node_of(self, claim_id: str) -> list[str]:
        claim = self.view.state.claims.get(claim_id)
        return [claim.node] if claim is not None and claim.node else []

    async def reconcile_forever(self, start_seq: int) -> None:
        """After catching up with the log as it was at start, keep alerts and drift current."""
        await self.follower.wait_until(lambda: self.view.last_seq >= start_seq, timeout=None)
        self.dirty_nodes.update(self.view.observed.node_devices)
        self.changed.set()
        while True:
            try:  # a change, or the first settle time after an end, whichever comes first
                await asyncio.wait_for(self.changed.wait(), self._until_next_end())
            except asyncio.TimeoutError:
                pass
            self.changed.clear()
            await self.reconcile_once()
            await asyncio.sleep(RECONCILE_EVERY_S)

    def _until_next_end(self) -> float | None:
        order, settling = self._settle_order, self.settling
        while order and settling.get(order[0][1], (None,))[0] != order[0][0]:
            heapq.heappop(order)  # left behind by a claim that ended again
        if not order:
            return None
        return max(order[0][0] - self.clock(), 0.0)

    async def reconcile_once(self) -> int:
        """Append what the rules call for now; wait until it is folded back. Returns events appended."""
        view, now = self.view, self.clock()
        judged = view.last_seq
        namespaces = set(known_namespaces(view.state)) | {ns for ns, _ in view.alerts}
        nodes, self.dirty_nodes = self.dirty_nodes | self._settled_now(), set()
        changes = alert_changes(view, namespaces, now) + drift_changes(
            view, nodes, self.settings.stale_after_s, now, self.settings.release_unused_after_s,
            settling=self.settling)
        last, appended_count = 0, 0
        for event in changes:
            subject = _subject_of(event)
            try:
                appended = await self.log.append(subject, event, msg_id=_msg_id(event, view.last_seq),
                                                 expected_last_subject_seq=self.subject_seqs.get(subject, 0))
            except AppendConflict as conflict:  # written meanwhile (another replica): judged again once read
                await self._fenced_out(subject, event, conflict)
                continue
            self.subject_seqs[subject] = max(self.subject_seqs.get(subject, 0), appended.seq)
            last, appended_count = max(last, appended.seq), appended_count + 1
        if last:
            self.events_appended += appended_count
            await self.follower.wait_for_seq(last)
        self.judged_through = max(self.judged_through, judged)
        return len(changes)

    async def _fenced_out(self, subject: str, event: ev.Event, conflict: AppendConflict) -> None:
        """Another writer appended on `subject` since this fold's last look (a second quota replica
        deciding the same alert, a quota command, a node agent's drift report): nothing is appended
        now; once the fold has read up to that message the rules judge again (an alert the other
        replica raised is then no change). A message there no fold believes (a forgery) still moves
        the subject: once read past, its sequence is taken as this subject's last."""
        self.fenced_out += 1
        actual = conflict.actual or 0
        if actual and await self.follower.wait_for_seq(actual, timeout=QUERY_WAIT_S):
            self.subject_seqs[subject] = max(self.subject_seqs.get(subject, 0), actual)
        if isinstance(event, (ev.DriftDetected, ev.DriftCleared)):
            self.dirty_nodes.add(event.node)
        self.changed.set()

    # --- queries ---------------------------------------------------------------------------------

    def get_default(self) -> dict:
        state = self.view.state
        if state.default_quota is None:
            raise DomainError("not-found", "no default quota is set: namespaces without a quota of their "
                                           "own are unlimited", "default")
        applies = [ns for ns in known_namespaces(state) if quota_source(state, ns) == "default"]
        return {"spec": state.default_quota, "applies_to": applies, "as_of_seq": self.view.last_seq}

    def _quota_status(self, namespace: str) -> QuotaStatus:
        """What get and status answer for a namespace: every namespace `list` shows has one (one
        with use but no quota, and no default, shows as unlimited)."""
        known = namespace in known_namespaces(self.view.state)
        status = namespace_status(self.view, namespace, unlimited=known)
        if status is None:
            raise DomainError("not-found", f"no quota for namespace {namespace!r}: it has none of its "
                                           "own and no default quota is set, so it is unlimited", "namespace")
        return status

    def get(self, namespace: str) -> QuotaStatus:
        return self._quota_status(namespace)

    def list(self, parent: str = "") -> list[QuotaStatus]:
        """Every namespace with a quota, in a cohort or with use; under `parent`: its subtree."""
        statuses = all_statuses(self.view)
        if not parent:
            return statuses
        members = set(tree_of(self.view.state).members(parent))
        return [s for s in statuses if s.namespace in members]

    async def up_to_date(self) -> None:
        """Before a query is answered: the fold has read what was stored when it was asked (it
        reads the log in bursts, so its own alerts and drift reports come back up to 50 ms late).
        NATS trouble, or a fold that takes longer than `QUERY_WAIT_S`: answered from what is read."""
        try:
            end = await self.log.last_seq()
        except TRANSIENT:
            return
        await self.follower.wait_for_seq(end, timeout=QUERY_WAIT_S)

    def status(self, namespace: str = "") -> dict:
        quotas = [self._quota_status(namespace)] if namespace else all_statuses(self.view)
        drift = sorted(self.view.drifts.values(), key=lambda d: (d.node, d.kind, d.uuid, d.claim_id))
        if namespace:
            drift = [d for d in drift if self._drift_namespace(d) in (namespace, "")]
        recent = [e for e in self.view.recent if not namespace or namespace in self._namespaces_of(e)]
        return {"as_of_seq": self.view.last_seq, "quotas": quotas, "drift": drift, "recent": recent,
                "stale_after_s": self.settings.stale_after_s, "default": self.view.state.default_quota}

    def _namespaces_of(self, event) -> tuple[str, ...]:
        if isinstance(event, ev.QuotaBorrowed):
            return (event.namespace, event.parent, *event.lenders, *event.through)
        if isinstance(event, ev.QuotaReclaimed):
            return (event.borrower, event.lender, event.parent)
        claim = self.view.state.claims.get(getattr(event, "claim_id", "") or "")
        return (claim.spec.namespace,) if claim is not None else ()

    def _drift_namespace(self, drift: ev.DriftDetected) -> str:
        claim = self.view.state.claims.get(drift.claim_id) if drift.claim_id else None
        return claim.spec.namespace if claim is not None else ""


# Events that end no claim and change no node's drift (`_ends`, `_nodes_to_judge`): submits,
# bindings and heartbeats are most of what the follower hands over.
_NEITHER_ENDS_NOR_JUDGES = frozenset((ev.ClaimSubmitted, ev.ClaimBound, ev.NodeHeartbeat,
                                      ev.LeaseRenewed, ev.ClaimActivity))


_RULE_SUBJECTS = ("gpu.evt.quota.", "gpu.evt.drift.")  # subjects.quota(ns), subjects.drift(node)


def _subject_of(event: ev.Event) -> str:
    if isinstance(event, (ev.DriftDetected, ev.DriftCleared)):
        return subjects.drift(event.node)
    return subjects.quota(event.namespace)


def _msg_id(event: ev.Event, based_on_seq: int) -> str:
    """Deterministic: two replicas (or a restart) deciding the same change at the same point of
    the log append it once (JetStream dedup)."""
    if isinstance(event, (ev.DriftDetected, ev.DriftCleared)):
        key = f"{event.kind}:{event.node}:{event.uuid}:{event.claim_id}:{event.pid}"
    else:
        key = f"{event.namespace}:{event.resource}"
    return f"quota:{type(event).__name__}:{key}:{based_on_seq}"


def register_handlers(ctx: ServiceContext, service: QuotaService) -> None:
    b = ctx.broker

    async def set_quota(c: cmd.SetQuota):
        return cmd.ok(await service.set_quota(c))

    async def delete_quota(c: cmd.DeleteQuota):
        return cmd.ok(await service.delete_quota(c))

    async def get_quota(c: cmd.GetQuota):
        await service.up_to_date()
        return cmd.ok(service.get(c.namespace))

    async def list_quotas(c: cmd.ListQuotas):
        await service.up_to_date()
        return cmd.ok(service.list(c.parent))

    async def quota_status(c: cmd.GetQuotaStatus):
        await service.up_to_date()
        return cmd.ok(service.status(c.namespace))

    async def set_default(c: cmd.SetDefaultQuota):
        return cmd.ok(await service.set_default(c))

    async def get_default(c: cmd.Query):
        await service.up_to_date()
        return cmd.ok(service.get_default())

    async def delete_default(c: cmd.Query):
        return cmd.ok(await service.delete_default())

    async def apply(c: cmd.ApplyQuotas):
        return cmd.ok(await service.apply(c))

    # one queue group: each request to one replica (without it every replica appended every set)
    q = QUEUE
    command(b, subjects.command("quota.apply"), cmd.ApplyQuotas, apply, queue=q)
    command(b, subjects.command("quota.default.set"), cmd.SetDefaultQuota, set_default, queue=q)
    command(b, subjects.command("quota.default.get"), cmd.Query, get_default, queue=q)
    command(b, subjects.command("quota.default.delete"), cmd.Query, delete_default, queue=q)
    command(b, subjects.command("quota.set"), cmd.SetQuota, set_quota, queue=q)
    command(b, subjects.command("quota.delete"), cmd.DeleteQuota, delete_quota, queue=q)
    command(b, subjects.command("quota.get"), cmd.GetQuota, get_quota, queue=q)
    command(b, subjects.command("quota.list"), cmd.ListQuotas, list_quotas, queue=q)
    command(b, subjects.query("quota.status"), cmd.GetQuotaStatus, quota_status, queue=q)


async def build(ctx: ServiceContext) -> None:
    service = QuotaService(ctx.log, ctx.settings)
    ctx.quota = service  # type: ignore[attr-defined]  # for in-process tests
    _instrument(ctx, service)
    register_handlers(ctx, service)
    start_seq = await ctx.log.last_seq()
    ctx.spawn(service.follower.run(), "quota-follow")
    ctx.spawn(service.reconcile_forever(start_seq), "quota-reconcile")


def _instrument(ctx: ServiceContext, service: QuotaService) -> None:
    """Quota use and totals per namespace, from the fold, at scrape time."""
    ctx.metrics.gauges("gpuledger_quota_used", "What a namespace's allocations use now",
                       ("namespace", "resource"), lambda: census.quota_used(service.view.state))
    ctx.metrics.gauges("gpuledger_quota_limit", "A namespace quota's total (requests) per resource",
                       ("namespace", "resource"), lambda: census.quota_limits(service.view.state))
    ctx.metrics.follow_fold(lambda: service.view.state.last_seq, ctx.log.last_seq)
