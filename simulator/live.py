"""`gpuledger simulate --live`: replay a trace through the running system and time it.

Everything goes through the real paths: the trace's nodes register as simulated node agents
(`simulator.live_fleet`), each pod is published as a JSON ClaimSpec to the durable intake subject at
its accelerated creation time, the allocator decides, and the claim is released through the claim
service's release command when its lifetime (accelerated) has passed since its allocation. The
figures come from the event log, followed from where it stood when the run began
(`simulator.live_tracker`), so they show what any reader of the log would see.
"""

from __future__ import annotations

import asyncio
import heapq
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NoStreamResponseError, NotFoundError

from schemas import events as ev
from schemas import subjects
from schemas.authority import admits
from shared.jetstream import JetStreamEventLog
from shared.natscluster import url_inbox_prefix
from shared.settings import Settings
from simulator.live_fleet import TraceFleet
from simulator.live_plan import RUN_LABEL, Arrival, arrivals
from simulator.live_report import LiveReport, build_report, without_password
from simulator.live_tracker import Tracker
from simulator.trace import Trace

RELEASE = subjects.command("claim.release")
NODE_FENCES = subjects.node_releases("x")[: -len("x.release")]  # gpu.evt.fence.
SUMMARY = subjects.query("cluster.summary")


class LiveError(RuntimeError):
    """The live run cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class LiveOptions:
    speed: float = 1000.0  # trace seconds per wall second
    limit: int | None = None  # the first N pods by creation time
    max_gap: float | None = None  # cap on an idle wall gap between two arrivals (seconds)
    drain_s: float = 15.0  # after the last submit, wait this long at most for claims to settle
    node_prefix: str = "live-"
    heartbeat_s: float | None = None  # default GPULEDGER_HEARTBEAT_S
    connect_timeout_s: float = 5.0
    releases_in_flight: int = 32


def shown(url: str) -> str:
    """The URL with any password masked, for messages (the ops URL carries its secret)."""
    return re.sub(r"(://[^:/@,]+):[^@,]*@", r"\1:***@", url)


async def connect(url: str, timeout: float = 5.0):
    """A connection, or LiveError within `timeout` (nats-py would otherwise retry for long)."""
    async def quiet(_err) -> None:
        pass

    try:
        # its own inbox, not the shared `_INBOX.` the publisher may read (url_inbox_prefix)
        return await asyncio.wait_for(nats.connect(url, inbox_prefix=url_inbox_prefix(url),
                                                   connect_timeout=min(2.0, timeout), allow_reconnect=False,
                                                   max_reconnect_attempts=0, error_cb=quiet), timeout)
    except (Exception, asyncio.TimeoutError) as err:
        why = f"no answer within {timeout:g}s" if isinstance(err, asyncio.TimeoutError) else type(err).__name__
        raise LiveError(f"cannot reach NATS at {shown(url)} ({why}); is the system running (`gpuledger up`)? "
                        "Set --nats-url, or leave it and GPULEDGER_NATS_URL unset to start one") from None


async def replay_live(trace: Trace, url: str, options: LiveOptions = LiveOptions(), run_id: str | None = None,
                      progress: Callable[[str], None] | None = None) -> LiveReport:
    run_id = run_id or f"live-{uuid.uuid4().hex[:8]}"
    plan = arrivals(trace, run_id, options.speed, options.limit, options.max_gap,  # PlanError first
                    options.node_prefix)
    nc = await connect(url, options.connect_timeout_s)
    try:
        return await LiveRun(trace, plan, nc, url, options, run_id, progress).execute()
    finally:
        await nc.close()


class LiveRun:
    def __init__(self, trace: Trace, plan: list[Arrival], nc, url: str, options: LiveOptions, run_id: str,
                 progress: Callable[[str], None] | None):
        self.trace, self.plan, self.nc, self.url, self.options = trace, plan, nc, url, options
        self.say = progress or (lambda _line: None)
        self.log = JetStreamEventLog(nc)
        self.tracker = Tracker(prefix=f"{run_id}-")
        self.fleet = TraceFleet(trace.nodes, options.node_prefix, {RUN_LABEL: run_id}, self.log, nc)
        self.claim_subjects = subjects.claim(f"{run_id}-")
        self.decisions: asyncio.Queue = asyncio.Queue()
        self.due: list[tuple[float, str]] = []  # (monotonic time, claim id) releases by lifetime
        self.wake, self.changed = asyncio.Event(), asyncio.Event()
        self.gate = asyncio.Semaphore(options.releases_in_flight)
        self.tasks: list[asyncio.Task] = []  # the run's duties; a failure in one ends the run
        self.releasing: set[asyncio.Task] = set()
        self.release_errors: list[str] = []
        self.released_at_end: set[str] = set()
        self.lag = 0.0

    # --- the run ---------------------------------------------------------------------------------

    async def execute(self) -> LiveReport:
        began = time.monotonic()
        start_seq = await self._check_system()
        try:
            self._spawn(self._follow(start_seq), self._bind_forever(), self._release_forever())
            self.say(f"registering {len(self.trace.nodes)} nodes as {self.options.node_prefix}*")
            await self.fleet.register()
            self._spawn(self.fleet.heartbeat_forever(self.options.heartbeat_s or Settings().heartbeat_s))
            setup_s = time.monotonic() - began
            self.say(f"submitting {len(self.plan)} claims over {self.plan[-1].at:.1f} s "
                     f"(speed {self.options.speed:g}x)")
            self._spawn(self._report_progress())
            await self._submit_all()
            await self._drain()
            end = time.monotonic()
            await self._clean_up()
        finally:
            await self._stop_tasks()
        return build_report(self.tracker.claims, end, self.released_at_end, nats_url=without_password(self.url),
                            nodes=len(self.trace.nodes), gpus=self.trace.capacity // 1000,
                            speed=self.options.speed, submit_lag_max_ms=round(1000 * self.lag, 2),
                            setup_s=round(setup_s, 3), release_failures=len(self.release_errors))

    async def _check_system(self) -> int:
        """The claim service answers and the stream exists; the log's next sequence."""
        try:
            await self.nc.request(SUMMARY, b"{}", timeout=self.options.connect_timeout_s)
        except (NoRespondersError, NatsTimeout, asyncio.TimeoutError):
            raise LiveError(f"no claim service answers on {shown(self.url)} ({SUMMARY}); start the system "
                            "with `gpuledger up`") from None
        try:
            return await self.log.last_seq() + 1
        except NotFoundError:
            raise LiveError(f"no stream {subjects.STREAM} on {shown(self.url)}: the services create it "
                            "when they start") from None

    def _spawn(self, *coros) -> None:
        self.tasks += [asyncio.create_task(c) for c in coros]

    def _check_tasks(self) -> None:
        """A background duty that failed ends the run with its error."""
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise LiveError(f"live run failed: {type(task.exception()).__name__}: {task.exception()}")

    async def _stop_tasks(self) -> None:
        everything = [*self.tasks, *self.releasing]
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)

    # --- submitting ------------------------------------------------------------------------------

    async def _submit_all(self) -> None:
        """Each claim at its time; the claims due together are published together (concurrently),
        so a burst is not held back by one acknowledgement after another."""
        js, start, i = self.nc.jetstream(), time.monotonic(), 0
        while i < len(self.plan):
            delay = start + self.plan[i].at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self._check_tasks()
            elapsed, due = time.monotonic() - start, []
            while i < len(self.plan) and self.plan[i].at <= elapsed:
                self.lag = max(self.lag, elapsed - self.plan[i].at)
                due.append(self.plan[i])
                i += 1
            await asyncio.gather(*(self._publish(js, arrival) for arrival in due))

    async def _publish(self, js, arrival: Arrival) -> None:
        claim_id = arrival.claim.claim_id
        self.tracker.submitted(claim_id, time.monotonic(), arrival.lifetime)
        try:
            await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(arrival.claim),
                             headers={"Nats-Msg-Id": claim_id})
        except NoStreamResponseError:
            raise LiveError(f"no intake stream answers on {subjects.INTAKE_CLAIMS} at {shown(self.url)}") from None
        except Exception as err:  # an intake that does not acknowledge: the system is not healthy
            raise LiveError(f"publishing claim {claim_id} to {subjects.INTAKE_CLAIMS} failed: "
                            f"{type(err).__name__} {err}") from None

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.options.drain_s
        while not self.tracker.settled() and time.monotonic() < deadline:
            self._check_tasks()
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(0.5, max(deadline - time.monotonic(), 0.01)))
            except asyncio.TimeoutError:
                pass

    async def _report_progress(self, every_s: float = 5.0) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(every_s)
            claims = self.tracker.claims.values()
            allocated = sum(1 for t in claims if t.allocated is not None)
            self.say(f"  {time.monotonic() - started:5.0f} s: submitted {len(claims)}/{len(self.plan)}, "
                     f"allocated {allocated}, bound {sum(1 for t in claims if t.bound is not None)}, "
                     f"released {sum(1 for t in claims if t.released is not None)}")

    # --- following the log -----------------------------------------------------------------------

    def _wanted(self, subject: str) -> bool:
        # a node's release subject too: a claim allocated and not bound is released there
        return (subject in (subjects.DECISIONS, subjects.INTAKE_BATCHES, subjects.SUBMITS, self.fleet.subject)
                or subject.startswith(self.claim_subjects)
                or (subject.startswith(NODE_FENCES) and subject.endswith(".release")))

    async def _follow(self, start_seq: int) -> None:
        async for batch in self.log.follow_raw(start_seq):
            now = time.monotonic()
            for _seq, subject, data, _headers in batch:
                if not self._wanted(subject):
                    continue
                try:
                    event = ev.decode_event(data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # a newer event type: not one this run depends on
                if not admits(subject, event):  # what no fold believes (schemas/authority.py)
                    continue
                self.tracker.observe(event, now)
                if isinstance(event, ev.DecisionBatch):
                    self.decisions.put_nowait(event)
            for claim_id in self.tracker.take_allocated():
                self._schedule_release(claim_id, now)
            self.changed.set()

    async def _bind_forever(self) -> None:
        while True:
            await self.fleet.bind(await self.decisions.get())

    # --- releasing -------------------------------------------------------------------------------

    def _schedule_release(self, claim_id: str, allocated_at: float) -> None:
        lifetime = self.tracker.claims[claim_id].lifetime
        if lifetime is not None:  # None: running when the trace ended; released at the end
            heapq.heappush(self.due, (allocated_at + lifetime, claim_id))
            self.wake.set()

    async def _release_forever(self) -> None:
        while True:
            self.wake.clear()
            delay = self.due[0][0] - time.monotonic() if self.due else 3600.0
            if delay > 0:
                try:
                    await asyncio.wait_for(self.wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                continue
            _, claim_id = heapq.heappop(self.due)
            task = asyncio.create_task(self._release(claim_id, "finished: trace lifetime"))
            self.releasing.add(task)
            task.add_done_callback(self.releasing.discard)

    async def _release(self, claim_id: str, reason: str) -> None:
        """Through the claim service's release command (which waits for its own view to reach a
        claim it does not know yet, so a claim released as soon as it is placed is found)."""
        async with self.gate:
            error = await self._release_once(claim_id, reason)
        if error:
            self.release_errors.append(f"{claim_id}: {error}")
        else:
            self.tracker.claims[claim_id].release_done = True

    async def _release_once(self, claim_id: str, reason: str) -> str:
        """"" when accepted, else the error."""
        try:
            msg = await self.nc.request(RELEASE, msgspec.json.encode({"claim_id": claim_id, "reason": reason}),
                                        timeout=10.0)
            reply = msgspec.json.decode(msg.data)
        except Exception as err:  # counted and shown; the run goes on
            return type(err).__name__
        if reply.get("ok"):
            return ""
        error = reply.get("error") or {}
        return f"{error.get('code', 'error')}: {error.get('message', reply)}"

    async def _clean_up(self, timeout: float = 30.0) -> None:
        """Release every claim still holding or waiting, so a shared system is left as found."""
        self._stop_releaser()
        await asyncio.gather(*self.releasing, return_exceptions=True)  # lifetime releases under way
        await self._wait(lambda: all(t.accepted is not None or t.rejected for t in self.tracker.claims.values()),
                         timeout / 3)
        left = [c for c in self.tracker.open_claims() if not self.tracker.claims[c].release_done]
        if left:
            self.say(f"releasing the {len(left)} claims still open")
        self.released_at_end = set(left)
        self.release_errors.clear()  # a lifetime release that failed is tried again just above
        await asyncio.gather(*(self._release(c, "live replay ended") for c in left))
        done = [t for t in self.tracker.claims.values() if t.release_done and not t.ended and not t.rejected]
        await self._wait(lambda: all(t.released is not None for t in done), timeout)
        if self.release_errors:
            self.say(f"warning: {len(self.release_errors)} claims could not be released at the end, e.g. "
                     f"{self.release_errors[0]}; release them with `gpuledger claim release`")

    def _stop_releaser(self) -> None:
        self.due.clear()
        self.wake.set()

    async def _wait(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            self._check_tasks()
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), 0.5)
            except asyncio.TimeoutError:
                pass


async def run_live(trace: Trace, url: str | None, options: LiveOptions = LiveOptions(),
                   policy: str | None = None, progress: Callable[[str], None] | None = None) -> LiveReport:
    """On `url`'s system, or on one started for the run (`policy` sets its allocator's policy)."""
    if url:
        if policy:
            raise LiveError("--policy: an existing system decides with its allocator's GPULEDGER_POLICY; "
                            "leave --policy out, or leave --nats-url out to start a system with it")
        return await replay_live(trace, url, options, progress=progress)
    from simulator.live_system import SystemStartError, started_system

    (progress or (lambda _l: None))("starting the system (gpuledger up) on a temporary data folder")
    try:
        async with started_system(env={"GPULEDGER_POLICY": policy} if policy else None) as started:
            return await replay_live(trace, started, options, progress=progress)
    except SystemStartError as err:
        raise LiveError(str(err)) from None
