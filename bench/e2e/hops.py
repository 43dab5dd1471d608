"""Where a claim's latency goes, hop by hop, from times the log already holds.

Three stamps split publish -> ClaimAllocated seen, with no instrumentation of the services:
- `validated`: the claim's `ClaimSubmitted.at`, the claim service's clock when it validated the
  claim it drained from the intake;
- `pass_started`: its `ClaimAllocated.at`, the allocator's clock when the decision pass that
  allocated it began (`DecideContext.now`);
- and the benchmark's own two: just before publishing, and when the decision reached it.

So `intake` is publish -> validated (nats-server storing it, then waiting for the claim service's
intake loop: a batch being handled, a busy event loop, a CPU), `to_pass` is validated -> pass
started (the intake batch appended and stored, delivered to the allocator, folded, then waiting
for the pass in flight to end), `pass_to_seen` is pass started -> seen (the decision itself, the
decision batch appended and stored, delivered to this process). Every service's clock is the
machine's (`time.time`), the benchmark's is converted to it: on one machine the hops add up to the
latency the benchmark reports; across machines they carry the clocks' difference.

`stored_hops_ms` splits the same latency in five with the time nats-server stored each message
(JetStream keeps one per message, read after the run with `stored_times`): publish -> validated,
validated -> its ClaimSubmitted stored (the claim service's append), stored -> pass started (the
message delivered to the allocator, folded, and the pass in flight waited for), pass -> its
DecisionBatch stored (deciding and the append), stored -> seen here. `batches` says how many of the
run's claims each stored intake message and decision batch carried.

`path_ms` (`bench e2e --hops`) splits it in ten, with the stamps the services put on their appends
when told to (shared/hop_stamps.py): publish -> the intake message stored (`intake_stored`, the
server's time) -> it reached the claim service (`claim_read`) -> its intake loop took it
(`claim_taken`) -> validated -> the append stored -> the allocator folded it (`allocator_read`) ->
its pass began -> the pass had decided (`decided`) -> the DecisionBatch stored -> seen here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from nats.js import api

from schemas import events as ev
from shared import hop_stamps

HOPS = ("intake", "to_pass", "pass_to_seen")
STORED_HOPS = ("publish_to_validated", "validated_to_stored", "stored_to_pass", "pass_to_stored", "stored_to_seen")
PATH_STAMPS = ("published", "intake_stored", "claim_read", "claim_taken", "validated", "submitted_stored",
               "allocator_read", "pass_started", "decided", "decision_stored", "seen")
PATH_HOPS = tuple(f"{a}_to_{b}" for a, b in zip(PATH_STAMPS, PATH_STAMPS[1:]))
TAIL_WINDOW_S = 0.1  # `HopTimes.tail`: the span of publish time its slow claims are counted in


@dataclass
class HopTimes:
    prefix: str  # claim ids of this run start with it
    validated: dict[str, float] = field(default_factory=dict)  # claim -> ClaimSubmitted.at
    pass_started: dict[str, float] = field(default_factory=dict)  # claim -> ClaimAllocated.at
    submitted_in: dict[str, int] = field(default_factory=dict)  # claim -> seq storing its ClaimSubmitted
    allocated_in: dict[str, int] = field(default_factory=dict)  # claim -> seq of its DecisionBatch
    intake_sizes: dict[int, int] = field(default_factory=dict)  # seq -> the run's claims submitted in it
    decision_sizes: dict[int, int] = field(default_factory=dict)  # seq -> the run's claims allocated in it
    submitted_at: dict[str, int] = field(default_factory=dict)  # claim -> its place among the message's claims
    allocated_at: dict[str, int] = field(default_factory=dict)  # claim -> its place among the batch's decisions

    def observe(self, event: ev.Event, seq: int = 0) -> None:
        """Take the stamps an event carries (a stored event of the log, in any order; `seq`, where
        it is stored, for the stored times and the batch sizes)."""
        if isinstance(event, ev.DecisionBatch):
            for place, decision in enumerate(event.decisions):
                if isinstance(decision, ev.ClaimAllocated) and decision.claim_id.startswith(self.prefix):
                    if decision.claim_id not in self.pass_started:
                        self.pass_started[decision.claim_id] = decision.at
                        self.allocated_in[decision.claim_id] = seq
                        self.allocated_at[decision.claim_id] = place
                        self.decision_sizes[seq] = self.decision_sizes.get(seq, 0) + 1
            return
        members = [m for m in ev.flatten(event) if isinstance(m, ev.ClaimSubmitted)]
        for place, member in enumerate(members):
            if member.claim.claim_id.startswith(self.prefix):
                if member.claim.claim_id not in self.validated:
                    self.validated[member.claim.claim_id] = member.at
                    self.submitted_in[member.claim.claim_id] = seq
                    self.submitted_at[member.claim.claim_id] = place
                    self.intake_sizes[seq] = self.intake_sizes.get(seq, 0) + 1

    def hops_ms(self, published: dict[str, float], seen: dict[str, float]) -> dict[str, dict]:
        """p50, p90 and p99 of each hop in ms, over the claims with every stamp; `published` and
        `seen` in the services' clock (unix seconds)."""
        spans: dict[str, list[float]] = {hop: [] for hop in HOPS}
        for claim_id, at_seen in seen.items():
            at_published = published.get(claim_id)
            at_validated = self.validated.get(claim_id)
            at_pass = self.pass_started.get(claim_id)
            if at_published is None or at_validated is None or at_pass is None:
                continue
            spans["intake"].append(at_validated - at_published)
            spans["to_pass"].append(at_pass - at_validated)
            spans["pass_to_seen"].append(at_seen - at_pass)
        return {hop: _quantiles_ms(values) for hop, values in spans.items()}


    def stored_hops_ms(self, published: dict[str, float], seen: dict[str, float],
                       stored_at: dict[int, float]) -> dict[str, dict]:
        """p50, p90 and p99 of each of the five hops in ms, over the claims with every stamp and
        both messages' stored times (`stored_at`: seq -> unix seconds, `stored_times`)."""
        spans: dict[str, list[float]] = {hop: [] for hop in STORED_HOPS}
        for claim_id, at_seen in seen.items():
            stamps = (published.get(claim_id), self.validated.get(claim_id),
                      stored_at.get(self.submitted_in.get(claim_id, 0)), self.pass_started.get(claim_id),
                      stored_at.get(self.allocated_in.get(claim_id, 0)), at_seen)
            if None in stamps:
                continue
            for hop, before, after in zip(STORED_HOPS, stamps, stamps[1:]):
                spans[hop].append(after - before)
        return {hop: _quantiles_ms(values) for hop, values in spans.items()}

    def path(self, claim_id: str, published: float, seen: float, stored_at: dict[int, float],
             stamps: dict[int, dict[str, list[float]]]) -> list[float] | None:
        """The claim's eleven stamps (PATH_STAMPS, unix seconds), None when one is missing."""
        submitted, allocated = self.submitted_in.get(claim_id, 0), self.allocated_in.get(claim_id, 0)
        intake, decision = stamps.get(submitted, {}), stamps.get(allocated, {})
        at_intake, at_decision = self.submitted_at.get(claim_id, 0), self.allocated_at.get(claim_id, 0)
        found = [published, _nth(intake.get("stored"), at_intake) / 1e9, _nth(intake.get("arrived"), at_intake),
                 _nth(intake.get("taken"), 0), self.validated.get(claim_id), stored_at.get(submitted),
                 _nth(decision.get("read"), at_decision), self.pass_started.get(claim_id),
                 _nth(decision.get("decided"), 0), stored_at.get(allocated), seen]
        return None if any(not at for at in found) else found

    def path_ms(self, published: dict[str, float], seen: dict[str, float], stored_at: dict[int, float],
                stamps: dict[int, dict[str, list[float]]]) -> dict[str, dict]:
        """p50, p90, p99 and mean of each of the ten hops between PATH_STAMPS in ms, over the
        claims with every stamp (`stamps`: seq -> the services' hop header, `stored_times`)."""
        names = PATH_HOPS
        spans: dict[str, list[float]] = {name: [] for name in names}
        for claim_id, at_seen in seen.items():
            found = self.path(claim_id, published.get(claim_id, 0.0), at_seen, stored_at, stamps)
            if found is None:
                continue
            for name, before, after in zip(names, found, found[1:]):
                spans[name].append(after - before)
        return {name: _quantiles_ms(values, mean=True) for name, values in spans.items()}

    def tail(self, published: dict[str, float], seen: dict[str, float], stored_at: dict[int, float],
             stamps: dict[int, dict[str, list[float]]] | None = None, q: float = 0.99) -> dict:
        """Where the slowest claims' time goes: the claims whose latency is at or past the
        `q`-quantile, each hop's mean over them beside its mean over every claim (the ten hops of
        `path_ms` where the services stamped, else the five of `stored_hops_ms`), and how they
        bunch in time (`windows`: the TAIL_WINDOW_S spans of publish time that hold them; a few
        windows holding them all is a stall of something, many windows is queueing spread over
        the run). `spans`: each tail claim's (published, seen), for `tail_cpu_waits`; `ids`, theirs."""
        rows: dict[str, list[float]] = {}
        for claim_id, at_seen in seen.items():
            at_published = published.get(claim_id)
            if at_published is None:
                continue
            found = self.path(claim_id, at_published, at_seen, stored_at, stamps) if stamps else None
            if found is None:
                found = self._stored_path(claim_id, at_published, at_seen, stored_at)
            if found is not None:
                rows[claim_id] = found
        if not rows:
            return {"claims": 0}
        width = max(len(found) for found in rows.values())
        rows = {c: found for c, found in rows.items() if len(found) == width}  # one kind of split
        names = PATH_HOPS if width == len(PATH_STAMPS) else STORED_HOPS
        totals = sorted(found[-1] - found[0] for found in rows.values())
        threshold = totals[min(len(totals) - 1, int(q * len(totals)))]
        slow = [found for found in rows.values() if found[-1] - found[0] >= threshold]

        def means(chosen: list[list[float]]) -> list[float]:
            return [round(1000 * statistics.fmean(f[i + 1] - f[i] for f in chosen), 3) for i in range(len(names))]

        first = min(found[0] for found in rows.values())
        windows: dict[int, int] = {}
        for found in slow:
            window = int((found[0] - first) / TAIL_WINDOW_S)
            windows[window] = windows.get(window, 0) + 1
        largest = max(windows.items(), key=lambda item: item[1])
        slowest = [c for c, found in rows.items() if found[-1] - found[0] >= threshold]
        return {"quantile": q, "threshold_ms": round(1000 * threshold, 2), "claims": len(slow),
                "hops_ms": {name: {"tail": tail, "all": every}
                            for name, tail, every in zip(names, means(slow), means(list(rows.values())))},
                "windows": len(windows), "window_s": TAIL_WINDOW_S,
                "largest_window": {"at_s": round(largest[0] * TAIL_WINDOW_S, 2), "claims": largest[1]},
                "spans": [(found[0], found[-1]) for found in slow], "ids": slowest}

    def _stored_path(self, claim_id: str, published: float, seen: float,
                     stored_at: dict[int, float]) -> list[float] | None:
        """The six stamps of `stored_hops_ms` (STORED_HOPS between them), None when one is missing."""
        found = [published, self.validated.get(claim_id), stored_at.get(self.submitted_in.get(claim_id, 0)),
                 self.pass_started.get(claim_id), stored_at.get(self.allocated_in.get(claim_id, 0)), seen]
        return None if any(at is None for at in found) else found

    def batches(self) -> dict[str, dict]:
        """How many of the run's claims each stored intake message and decision batch carried."""
        return {"claims_per_intake_message": _spread(list(self.intake_sizes.values())),
                "claims_per_decision_batch": _spread(list(self.decision_sizes.values()))}


async def stored_times(nc, stream: str, subject: str, first: int, last: int,
                       stamps: dict[int, dict[str, list[float]]] | None = None) -> dict[int, float]:
    """When nats-server stored each message of `stream` from `first` to `last` (unix seconds), by
    sequence: headers only, through a consumer of this read's own. `stamps`, when given, gets the
    services' hop header of each message that has one, decoded (shared/hop_stamps.py)."""
    found: dict[int, float] = {}
    if last < first:
        return found
    js = nc.jetstream()
    sub = await js.pull_subscribe(subject, stream=stream, config=api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first,
        ack_policy=api.AckPolicy.NONE, headers_only=True, inactive_threshold=30.0))
    try:
        while True:
            for msg in await sub.fetch(1000, timeout=5.0):
                seq, stored_ns, pending = _stored(msg)
                found[seq] = stored_ns / 1e9
                header = (msg.headers or {}).get(hop_stamps.HEADER) if stamps is not None else None
                if header:
                    stamps[seq] = hop_stamps.decode(header)
                if seq >= last or pending == 0:
                    return found
    finally:
        await sub.unsubscribe()


def _stored(msg) -> tuple[int, int, int]:
    """(stream sequence, stored time in ns, messages left) from a JetStream message's reply subject
    (`$JS.ACK.<stream>.<consumer>.<delivered>.<seq>.<consumer seq>.<ns>.<pending>`, two tokens more
    after `$JS.ACK` in the newer form): nats-py's own metadata rounds the time through a float."""
    tokens = msg.reply.split(".")
    at = 0 if len(tokens) == 9 else 2
    return int(tokens[5 + at]), int(tokens[7 + at]), int(tokens[8 + at])


def _spread(sizes: list[int]) -> dict:
    if not sizes:
        return {"messages": 0}
    ordered = sorted(sizes)
    return {"messages": len(ordered), "claims": sum(ordered), "mean": round(statistics.fmean(ordered), 2),
            "p50": ordered[len(ordered) // 2], "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "max": ordered[-1]}


def _nth(values: list[float] | None, place: int) -> float:
    """The stamp at `place` of a header's list (0.0: none)."""
    return values[place] if values and place < len(values) else 0.0


def _quantiles_ms(values: list[float], mean: bool = False) -> dict:
    if not values:
        return {"claims": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    found = {"claims": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}
    if mean:
        found["mean"] = round(1000 * statistics.fmean(ordered), 3)
    return found
