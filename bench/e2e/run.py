"""One e2e run (or a sweep of rates) on a stack started for it; the figures as one dict."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats

from ledger.follower import decode_batch, old_generation_off
from schemas import subjects
from shared import hop_stamps
from shared.jetstream import JetStreamEventLog
from shared.natscluster import url_inbox_prefix
from bench.e2e.check import Checker
from bench.e2e.cpu import CpuMeter, run_delay, waits_between
from bench.e2e.follow import Follower
from bench.e2e.hops import HopTimes, stored_times
from bench.e2e.load import Publisher, claim_mix
from bench.e2e.report import figures
from bench.e2e.stack import start_stack

SAMPLE_S = 0.5
HOPS_SAMPLE_S = 0.1  # with --hops: finer, to tell which process waited when the slowest claims passed


@dataclass(frozen=True)
class Options:
    claims: int = 20_000
    rate: float | None = None  # claims/s offered; None: as fast as the intake acknowledges
    nodes: int = 100  # 800 GPUs: with claims held ~20 ms, room at every rate this machine reaches
    hold_s: float = 0.02
    drain_s: float = 60.0  # after the last publish, how long claims may take to settle
    settle_s: float = 4.0  # then, for the agents' usage reports to show stopped workloads
    idle_s: float = 1.0  # CPU of the idle stack measured this long before the load
    data_dir: str = ""  # where the stack runs, kept after; "": a temporary folder, removed
    hops: bool = False  # the services stamp their appends: each claim's path in ten hops (hops.py)


def run_loop(main):
    """Run `main` on uvloop where it is installed, as the services and `simulate --live` do: this
    process shares the machine's cores with the stack it measures, and its own CPU per message is
    CPU the stack does not get."""
    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run
    return run(main)


async def run_on_new_stack(options: Options, runs: list[tuple[float | None, int]],
                           say=lambda _line: None) -> list[dict]:
    """Start the stack, do each run of (rate, claims) on it in turn, stop the stack."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-e2e-") as tmp:
        folder = Path(options.data_dir) if options.data_dir else Path(tmp) / "data"
        say(f"starting gpuledger up --demo with {options.nodes} nodes in {folder}")
        env = {hop_stamps.ENV: "1"} if options.hops else {hop_stamps.ENV: ""}
        stack = await start_stack(options.nodes, folder, env=env)
        try:
            # ops on its own inbox: the publisher may read `_INBOX.` (shared.natscluster.url_inbox_prefix)
            ops = await nats.connect(stack.url, inbox_prefix=url_inbox_prefix(stack.url))
            publisher = await nats.connect(stack.publisher_url)
            try:
                results = []
                for rate, claims in runs:
                    say(f"run: {claims} claims at {rate or 'max'}/s")
                    results.append(await one_run(stack, ops, publisher, options, rate, claims))
                return results
            finally:
                await ops.close()
                await publisher.close()
        finally:
            await stack.stop()


async def one_run(stack, ops, publisher_nc, options: Options, rate: float | None, count: int) -> dict:
    log = JetStreamEventLog(ops)
    run_id = f"e2e-{uuid.uuid4().hex[:6]}"
    follower = Follower(ops, run_id + "-", options.hold_s)
    publisher = Publisher(publisher_nc, follower.published)
    await publisher.start()
    start_seq = await log.last_seq() + 1
    outcomes_before = await _outcome_writes(ops)
    records_before = await _outcome_writes(ops, subjects.NODE_GRANTS_STREAM)
    tasks = [asyncio.ensure_future(follower.follow(start_seq)), asyncio.ensure_future(follower.release_forever())]
    meter = CpuMeter(stack.pid)
    idle = await _idle_cpu(meter, options.idle_s)
    meter.start()
    sampler = asyncio.ensure_future(_sample_forever(meter, HOPS_SAMPLE_S if options.hops else SAMPLE_S))
    claims = claim_mix(run_id, count)
    with collector_young_only():  # no pause of this process's own in what it measures
        client_cpu, began, client_wait = time.process_time(), time.monotonic(), run_delay(os.getpid())
        try:
            await publisher.publish_all(claims, rate)
            published_at = time.monotonic()
            await _until(lambda: follower.settled(publisher.acked), follower.changed, options.drain_s)
            await _projector_caught_up(stack.data_dir, await log.last_seq(), timeout=30.0)
            meter.sample()
            ended = time.monotonic()
            client_cpu = time.process_time() - client_cpu
            client_wait = run_delay(os.getpid()) - client_wait
        finally:
            for task in (*tasks, sampler):
                task.cancel()
            await asyncio.gather(*tasks, sampler, return_exceptions=True)
    await asyncio.sleep(options.settle_s)
    hops = HopTimes(run_id + "-")
    checker = await _check(log, start_seq, hops)
    result = figures(options, rate, follower, publisher, checker, meter, idle, client_cpu_s=client_cpu,
                     publish_s=published_at - began, wall_s=ended - began, client_wait_s=client_wait)
    sent, seen = _client_times(follower, publisher.acked)
    result["hops_ms"] = hops.hops_ms(sent, seen)
    stamps: dict[int, dict] = {}
    stored_at = await _stored_times(ops, start_seq, stamps if options.hops else None)
    result["hops_stored_ms"] = hops.stored_hops_ms(sent, seen, stored_at)
    if options.hops:
        result["hop_path_ms"] = hops.path_ms(sent, seen, stored_at, stamps)
    # the slowest 1 %: which hop holds their time, when they came, which process waited for a CPU then
    tail = hops.tail(sent, seen, stored_at, stamps if options.hops else None)
    result["tail_cpu_wait_ms_per_s"] = waits_between(meter.history, tail.pop("spans", []))
    tail["published_late_ms"] = published_late(publisher.late, tail.pop("ids", []))
    result["tail"] = tail
    result["batches"] = hops.batches()
    result["allocator_batches"] = await _allocator_batches(ops)
    written = await _outcome_writes(ops)
    if written is not None and outcomes_before is not None:
        result["outcome_writes_per_claim"] = round((written - outcomes_before) / max(count, 1), 3)
    written = await _outcome_writes(ops, subjects.NODE_GRANTS_STREAM)
    if written is not None and records_before is not None:  # the allocator's node records (node_writer.py)
        result["node_record_writes_per_claim"] = round((written - records_before) / max(count, 1), 3)
    return result


def published_late(late: dict[str, float], slowest: list[str]) -> dict[str, float]:
    """How long after its time in the timetable a claim went out, on average, for the slowest
    claims and for all (a publisher that fell behind sends what fell due at once: a burst of the
    benchmark's own making, which the slowest claims then queue behind)."""
    def mean_ms(values: list[float]) -> float:
        return round(1000 * sum(values) / len(values), 2) if values else 0.0
    return {"tail": mean_ms([late[c] for c in slowest if c in late]), "all": mean_ms(list(late.values()))}


@contextlib.contextmanager
def collector_young_only():
    """While the load runs, this process's collector scans only what was made since the last
    young collection: what lives when the run starts is frozen, and the older generations are not
    collected (`ledger.follower.old_generation_off`). Left on, the collector ran 40-50 middle and
    4 full collections in a run of 10,000 claims (a full one 20-90 ms of CPU here, over every
    object of the run's bookkeeping): one inside the run pauses the publisher, which then publishes
    what fell due meanwhile at once, and delays when decisions are seen, a burst and a delay of the
    benchmark's own making. Afterwards everything is unfrozen and collected as usual."""
    gc.collect()
    gc.freeze()
    try:
        with old_generation_off():
            yield
    finally:
        gc.unfreeze()


async def _outcome_writes(ops, stream: str = subjects.OUTCOMES_STREAM) -> int | None:
    """Messages ever stored on the outcome stream (its last sequence): the claim service's outcome
    writes, and its checkpoints (one a second at most); or on another `stream`."""
    try:
        return (await ops.jetstream().stream_info(stream)).state.last_seq
    except Exception:  # a figure, not the run
        return None


async def _allocator_batches(ops) -> dict:
    """The allocator's own count of its batches: appended, kept applied when they came back
    (services/allocator/own_batch.py) and rolled back to be folded again (since it started)."""
    try:
        reply = await ops.request(subjects.query("allocator.status"), b"{}", timeout=5.0)
        data = msgspec.json.decode(reply.data).get("data") or {}
    except Exception as err:  # a figure, not the run: say why it is missing
        return {"error": f"{type(err).__name__}: {err}"}
    return {key: data.get(key) for key in ("batches_appended", "own_batches_kept", "own_batches_undone",
                                           "own_batches_undone_by")}


async def _idle_cpu(meter: CpuMeter, seconds: float) -> dict[str, float]:
    """CPU seconds per second of the stack doing nothing but heartbeats, by role."""
    if seconds <= 0:
        return {}
    meter.start()
    await asyncio.sleep(seconds)
    meter.sample()
    return {name: used / seconds for name, used in meter.seconds_by_role().items()}


async def _sample_forever(meter: CpuMeter, every_s: float = SAMPLE_S) -> None:
    while True:
        await asyncio.sleep(every_s)
        meter.sample()


async def _until(done, changed: asyncio.Event, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), min(left, 0.5))
        except asyncio.TimeoutError:
            pass
    return True


async def _projector_caught_up(data_dir: Path, seq: int, timeout: float) -> bool:
    """The read model has committed up to `seq` (its work for the run is in the CPU figures)."""
    from services.projector.db import make_engine
    from services.projector.projector import DEFAULT_NAME
    from services.projector.store import read_position

    engine = make_engine(f"sqlite:///{(data_dir / 'readmodel.db').resolve()}")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await asyncio.to_thread(read_position, engine, DEFAULT_NAME) >= seq:
                    return True
            except Exception:  # the projector has not created its tables yet
                pass
            await asyncio.sleep(0.2)
        return False
    finally:
        engine.dispose()


def _client_times(follower: Follower, published: set[str]) -> tuple[dict[str, float], dict[str, float]]:
    """Each claim's publish and seen times, this process's monotonic clock put in unix time."""
    offset = time.time() - time.monotonic()
    claims = follower.claims
    sent = {c: claims[c].submitted + offset for c in published}
    seen = {c: claims[c].allocated + offset for c in published if claims[c].allocated is not None}
    return sent, seen


async def _stored_times(ops, start_seq: int, stamps: dict | None = None) -> dict[int, float]:
    """When each message of the run was stored (bench/e2e/hops.py), and the services' hop stamps
    into `stamps`; none if that cannot be read."""
    try:
        last = (await ops.jetstream().stream_info(subjects.STREAM)).state.last_seq
        return await stored_times(ops, subjects.STREAM, subjects.EVENTS, start_seq, last, stamps)
    except Exception:  # a figure, not the run
        return {}


async def _check(log: JetStreamEventLog, start_seq: int, hops: HopTimes | None = None) -> Checker:
    """Fold the whole log as stored now; findings from the run's first sequence on."""
    checker = Checker(since=start_seq)
    async for batch in log.follow_raw(1, stop_at=await log.last_seq()):
        checker.count(batch)
        events = [(seq, event) for seq, event in decode_batch(batch) if event is not None]
        checker.fold(events)
        if hops is not None:
            for seq, event in events:
                if seq >= start_seq:
                    hops.observe(event, seq)
    return checker
