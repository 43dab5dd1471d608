"""When the allocator heard from each node and about each claim, on its own clock.

Times in the log are the clock of the host that wrote them: a heartbeat's the node agent's, a
renewal's and a submit's the claim service's. Judging them against the allocator's clock made
every host's clock a part of the verdict (session 30: a GPU host 30 s behind was declared lost
while it heartbeat; one an hour ahead kept its claims an hour after it died). So silence is judged
by one clock only: the allocator's time of hearing (folding live) each heartbeat, registration,
allocation, renewal, activity report and submit, compared with its own `now` (as Kubernetes' node
lifecycle controller judges a kubelet by its own probe time, not the kubelet's). Each verdict
writes the time it was judged by into its decision (`NodeLost.heard_at`,
`AllocationExpired.heard_at`), so the log still says why, and replay folds the decision as stored
(nothing is judged again at replay).

What was folded before the allocator began hearing live (its catch-up) has no time of hearing:
it counts from `since`, when it began (a node silent since before a restart is lost a timeout
after it, not at once). Pure: the caller stamps; nothing here reads a clock.
"""

from __future__ import annotations

from schemas import events as ev

_NODE_WORDS = (ev.NodeHeartbeat, ev.NodeRegistered)


class Heard:
    __slots__ = ("own", "since", "nodes", "submitted", "renewed", "active", "submits", "earliest_submit",
                 "expiry")

    def __init__(self, own: str = "", since: float = 0.0) -> None:
        self.own = own  # this allocator's name: its own batches were noted when decided (`allocated`)
        self.since = since  # began hearing live: the floor of every time below
        self.nodes: dict[str, float] = {}  # node -> last heartbeat or registration heard
        self.submitted: dict[str, float] = {}  # claim -> its submit heard
        self.renewed: dict[str, float] = {}  # claim -> its allocation or last renewal heard
        self.active: dict[str, float] = {}  # claim -> its last activity report (or busy device) heard
        # for the pending expiry's scan (core/timers.py, `expire_pending`): claims whose submit was
        # heard (each once), the earliest such time since its last scan, and what that scan found
        self.submits = 0
        self.earliest_submit = float("inf")
        self.expiry = None

    def hear(self, event: ev.Event, at: float) -> None:
        """Note `event` (folded live) as heard at `at` (the caller's clock)."""
        kind = type(event)
        if kind in _NODE_WORDS:
            self.nodes[event.node] = at
        elif kind is ev.LeaseRenewed:
            self.renewed[event.claim_id] = at
        elif kind is ev.ClaimActivity:
            self.active[event.claim_id] = at
        elif kind is ev.ClaimSubmitted:
            claim_id = event.claim.claim_id
            if claim_id not in self.submitted:  # a retried submit is not newer
                self.submitted[claim_id] = at
                self.submits += 1
                if at < self.earliest_submit:
                    self.earliest_submit = at
        elif kind is ev.DecisionBatch and event.allocator != self.own:  # another allocator's
            self.allocated(event.decisions, at)

    def allocated(self, decisions, at: float) -> None:
        """A lease runs from when its allocation was heard (or decided, by this allocator)."""
        renewed = self.renewed
        for decision in decisions:
            if type(decision) is ev.ClaimAllocated:
                renewed[decision.claim_id] = max(renewed.get(decision.claim_id, 0.0), at)

    def usage(self, event: ev.UsageObserved, units: dict, at: float) -> None:
        """The holders of the devices a usage report shows busy are active (as the fold's
        `last_activity`): `units` is the state's, after the report was folded."""
        active = self.active
        for usage in event.devices:
            if usage.pids or usage.utilization_percent > 0:
                unit = units.get(usage.uuid)
                if unit is not None and unit.node == event.node:
                    for claim_id in unit.holders:
                        active[claim_id] = at

    def node(self, name: str) -> float:
        return max(self.nodes.get(name, 0.0), self.since)

    def submit(self, claim_id: str) -> float:
        return max(self.submitted.get(claim_id, 0.0), self.since)

    def renewal(self, claim_id: str) -> float:
        return max(self.renewed.get(claim_id, 0.0), self.since)

    def activity(self, claim_id: str) -> float:
        """Its submit, allocation, renewals and activity, as the fold's `last_activity` counts them."""
        return max(self.active.get(claim_id, 0.0), self.renewed.get(claim_id, 0.0),
                   self.submitted.get(claim_id, 0.0), self.since)

    def prune(self, claims, nodes) -> None:
        """Forget claims and nodes the state no longer holds, once the maps are twice its size."""
        for book, live in ((self.submitted, claims), (self.renewed, claims), (self.active, claims),
                           (self.nodes, nodes)):
            if len(book) > 2 * len(live) + 1024:
                kept = {key: at for key, at in book.items() if key in live}
                book.clear()
                book.update(kept)


# --- the times a pass judges by ------------------------------------------------------------------


def node_heard(ctx, node) -> float:
    """When the node was last heard from: the allocator's time of hearing with a `Heard`, else
    (a pure run on one clock: simulator, bench decide, core tests) the agent's time in the log."""
    heard = ctx.heard
    last = node.last_heartbeat if heard is None else heard.node(node.name)
    return max(last, ctx.heard_since)


def lease_heard(ctx, claim) -> float:
    heard = ctx.heard
    last = claim.last_renewed if heard is None else heard.renewal(claim.claim_id)
    return max(last, ctx.heard_since)


def activity_at(ctx, claim) -> float:
    """When the claim was last active (stale eviction)."""
    heard = ctx.heard
    return claim.last_activity if heard is None else heard.activity(claim.claim_id)


def submitted_at(ctx, claim) -> float:
    """When the claim was submitted, for how long it waited (pending expiry, starvation)."""
    heard = ctx.heard
    return claim.submitted_at if heard is None else heard.submit(claim.claim_id)
