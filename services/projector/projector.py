"""The projector: the pure core's fold, plus the rows each batch of events changed.

It keeps the allocator's own state (services.allocator.core) in memory, so the tables say exactly
what the allocator believes (a void allocation changes nothing here either). A batch is staged
event by event (fold, mark the rows it touched, index the claims it names), then written with its
position in one transaction (store.commit). On start it refolds the log up to the stored position
in memory without writing, then goes on from there: a crash never applies an event twice or skips
one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from schemas import events as ev
from ledger.evolve import apply_decision, evolve
from ledger.state import State, defer_index
from services.projector import rows
from services.projector.dirty import Dirty, claim_marks, claims_named, mark_event, marks_before
from services.projector.index import index_rows
from services.projector.models import ClaimRow, DeviceRow, NodeRow, PoolRow, QuotaRow
from services.projector.store import Changes, commit, read_position

log = logging.getLogger("gpuledger.projector")

ACTIVE = ("pending", "allocated", "bound")
DEFAULT_NAME = "readmodel"


class Projector:
    def __init__(self, engine, name: str = DEFAULT_NAME):
        self.engine = engine
        self.name = name
        self.reset()

    def reset(self) -> None:
        """Forget everything folded: the next run refolds from the stored position."""
        self.state = State()
        defer_index(self.state)  # the tables need no placement index: never built
        self.position = 0  # the last sequence folded into `state`
        self.ended_at: dict[str, float] = {}
        self.claim_seq: dict[str, int] = {}
        self._dirty = Dirty()
        self._index: list[dict] = []
        self._base = 0
        self._staged = 0
        # the node and device rows as last handed to a commit (a commit is retried until it lands,
        # or the projector is reset): a row that comes out the same is not written again
        self._written: dict[type, dict[str, dict]] = {NodeRow: {}, DeviceRow: {}}
        # claim -> the grants whose allocation rows are stored (as handed to a commit), for every
        # claim that has such rows; None until the first batch after a (re)fold, when it is read
        # from the state, which is then the stored position's: a claim absent has no rows
        self._allocs: dict[str, list] | None = None

    # --- the fold ------------------------------------------------------------------------------

    def stored_position(self) -> int:
        return read_position(self.engine, self.name)

    def fold(self, seq: int, event: ev.Event | None) -> list[bool] | None:
        """Fold one event into the state (and the end times and last sequences of its claims)."""
        if event is None:  # undecodable: skipped, but the position still moves past it
            self.position = seq
            return None
        affected = self._affected(event)
        before = {c: self.state.claims[c].status for c in affected if c in self.state.claims}
        applied = self._evolve(seq, event)
        times = None
        for claim_id in affected:
            claim = self.state.claims.get(claim_id)
            if claim is None:
                continue
            self.claim_seq[claim_id] = seq
            if before.get(claim_id, "pending") in ACTIVE and claim.status not in ACTIVE:
                if times is None:
                    times = _end_times(event)
                self.ended_at[claim_id] = times.get(claim_id, event.at)
        self.position = seq
        return applied

    def _affected(self, event: ev.Event) -> list[str]:
        claims = claims_named(event)
        for name in _nodes_that_end_claims(event):
            node = self.state.nodes.get(name)
            if node is not None:
                claims.extend(node.claims)
        return claims

    def _evolve(self, seq: int, event: ev.Event) -> list[bool] | None:
        if not isinstance(event, ev.DecisionBatch):
            evolve(self.state, event, seq)
            return None
        # What core.evolve does for a batch, keeping each decision's outcome for the index.
        applied = [apply_decision(self.state, decision) for decision in event.decisions]
        self.state.last_decision_seq = self.state.last_seq = seq
        return applied

    # --- batches -------------------------------------------------------------------------------

    def stage(self, seq: int, event: ev.Event | None) -> None:
        """Fold one event and remember what it changed, for the next `flush`."""
        if seq <= self.position:
            return  # already folded (a replay that overlaps): never applied twice
        if self._staged == 0:
            self._base = self.position
            if self._allocs is None:
                self._allocs = stored_allocations(self.state)
        self._staged += 1
        if event is not None and marks_before(event):
            mark_event(self.state, self._dirty, event)
        applied = self.fold(seq, event)
        if event is not None:
            mark_event(self.state, self._dirty, event)
            self._index.extend(index_rows(seq, event, applied))

    def changes(self) -> Changes:
        """The rows the staged events changed, read from the state as it is now."""
        changes = Changes(base_seq=self._base, last_seq=self.position, events=self._staged,
                          index=self._index)
        claim_marks(self.state, self._dirty)
        self._claims(changes)
        self._nodes_and_devices(changes)
        self._pools_and_quotas(changes)
        return changes

    @property
    def staged(self) -> int:
        return self._staged

    def take(self) -> Changes | None:
        """The staged batch as rows to commit (the caller commits it); None when nothing is staged."""
        if not self._staged:
            return None
        changes = self.changes()
        self.discard()
        return changes

    def flush(self) -> Changes | None:
        """Commit the staged batch with its position; None when nothing was staged."""
        changes = self.take()
        if changes is not None:
            commit(self.engine, self.name, changes)
        return changes

    def project(self, events: Iterable[tuple[int, ev.Event | None]], batch: int = 2000) -> int:
        """Stage and commit `events` in batches of `batch`; returns how many were projected."""
        count = 0
        for seq, event in events:
            self.stage(seq, event)
            count += 1
            if self._staged >= batch:
                self.flush()
        self.flush()
        return count

    def discard(self) -> None:
        """Forget staged work after a failed commit: the caller refolds from the stored position."""
        self._dirty, self._index, self._staged = Dirty(), [], 0

    # --- rows ----------------------------------------------------------------------------------

    def _claims(self, changes: Changes) -> None:
        """A claim new in the batch gets its whole row; one submitted before (its row stored by an
        earlier commit: every claim is marked in the batch of its submit) only what can change.
        Its allocation rows are written only when what it holds differs from what they say: at
        saturation a claim's row is updated about three times after its submit (its reasons, its
        allocation, its release, in separate windows), and each update deleted and wrote its
        allocation rows again, the same ones or none."""
        claim_rows, updates, base = [], [], self._base
        rewritten = set()  # claims whose stored allocation rows go
        ended_at, claim_seq, allocs = self.ended_at, self.claim_seq, self._allocs
        for claim_id in self._dirty.claims:
            claim = self.state.claims.get(claim_id)
            if claim is None:  # refused at intake, never submitted: only the index knows it
                if allocs.pop(claim_id, None) is not None:
                    rewritten.add(claim_id)
                continue
            if claim.seq <= base:
                updates.append(rows.claim_update(claim, ended_at.get(claim_id), claim_seq.get(claim_id, 0)))
            else:
                claim_rows.append(rows.claim_row(claim, ended_at.get(claim_id), claim_seq.get(claim_id, 0)))
            # the fold replaces a claim's grants (a new list), never changes them in place: the
            # same list is the same rows
            grants, stored = claim.grants, allocs.get(claim_id)
            if stored is not None:
                if stored is grants and claim.holds_devices:
                    continue
                rewritten.add(claim_id)
                del allocs[claim_id]
            if grants and claim.holds_devices:
                changes.allocations.extend(rows.allocation_rows(claim))
                allocs[claim_id] = grants
        changes.allocations_of = rewritten
        changes.replace[ClaimRow] = claim_rows
        changes.update[ClaimRow] = updates

    def _nodes_and_devices(self, changes: Changes) -> None:
        """Rows of the nodes and devices the batch touched, less those that came out as they were
        last written: under load most devices are taken and given back within one window."""
        state, dirty = self.state, self._dirty
        nodes, units = state.nodes, state.units
        changes.replace[NodeRow] = self._changed(
            NodeRow, ((n, rows.node_row(nodes[n])) for n in dirty.nodes if n in nodes))
        changes.remove[NodeRow] = self._forget(NodeRow, {n for n in dirty.nodes if n not in nodes})
        uuids = units.keys() if dirty.all_devices else dirty.devices
        changes.replace[DeviceRow] = self._changed(
            DeviceRow, ((u, rows.device_row(units[u])) for u in uuids if u in units))
        changes.remove[DeviceRow] = self._forget(DeviceRow, {u for u in dirty.devices if u not in units})

    def _changed(self, table: type, keyed_rows) -> list[dict]:
        written, out = self._written[table], []
        for key, row in keyed_rows:
            if written.get(key) != row:
                written[key] = row
                out.append(row)
        return out

    def _forget(self, table: type, keys: set[str]) -> set[str]:
        written = self._written[table]
        for key in keys:
            written.pop(key, None)
        return keys

    def _pools_and_quotas(self, changes: Changes) -> None:
        state, dirty = self.state, self._dirty
        if dirty.pools or dirty.all_devices:
            counts = rows.pool_device_counts(state)
            changes.all_pools = True
            changes.replace[PoolRow] = [rows.pool_row(p, counts.get(p.name, 0))
                                        for p in state.pools.values()]
        quota_rows, gone = [], set()
        for namespace in dirty.namespaces:
            spec, usage = state.quotas.get(namespace), state.usage.get(namespace)
            if spec is None and usage is None:
                gone.add(namespace)
            else:
                quota_rows.append(rows.quota_row(namespace, spec, usage))
        changes.replace[QuotaRow] = quota_rows
        changes.remove[QuotaRow] = gone


def stored_allocations(state: State) -> dict[str, list]:
    """The grants of every claim with allocation rows, when the state is the stored position's:
    those of the claims holding devices (`rows.allocation_rows`)."""
    return {claim_id: claim.grants for claim_id, claim in state.claims.items()
            if claim.grants and claim.holds_devices}


def _nodes_that_end_claims(event: ev.Event) -> list[str]:
    if isinstance(event, ev.NodeRegistered):
        return [event.node]  # a re-registration ends claims on devices that vanished
    if isinstance(event, ev.DecisionBatch):
        return [d.node for d in event.decisions if isinstance(d, ev.NodeLost)]
    return []


def _end_times(event: ev.Event) -> dict[str, float]:
    """The time of the decision that ended each claim a batch names (a batch carries one per
    decision; the first part that names a claim and has a time); other events: their own `at`.
    Built once per event: a batch of hundreds of releases was scanned once per claim it ended."""
    if not isinstance(event, (ev.DecisionBatch, ev.EventBatch)):
        return {}
    times: dict[str, float] = {}
    for part in event.decisions if isinstance(event, ev.DecisionBatch) else event.events:
        if part.at:
            for claim_id in claims_named(part):
                times.setdefault(claim_id, part.at)
    return times
