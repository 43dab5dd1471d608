"""One chaos run: `gpuledger up --demo` (optionally `--cluster 3`), bursts of claims, a fault in
the middle of each burst, resubmits and hostile input mixed in, then the independent check of
the whole log. Returns one dict of figures (`bench chaos --json` prints it)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats

from bench.chaos import faults as fx
from bench.chaos.checker import ChaosCheck
from bench.chaos.driver import Submitter, Watcher
from bench.chaos.fuzz import bad_intake_payloads, forged_events
from bench.chaos.timeline import Fault, stall_figures
from bench.e2e.load import claim_mix
from bench.e2e.stack import start_stack
from gpuledger_cli.up_supervise import restarted
from shared.jetstream import JetStreamEventLog
from shared.natscluster import connect_args, url_inbox_prefix


UP_RESTART_GRACE_S = 5.0  # after the outage, how long `up` gets to restart nats-server itself
RECOVERY_WAIT_S = 180.0  # the longest a run waits for decisions after a fault before going on


@dataclass(frozen=True)
class Options:
    claims: int = 2000
    rate: float = 200.0  # claims/s offered during each burst
    nodes: int = 20
    hold_s: float = 0.05
    faults: tuple[str, ...] = (*fx.SERVICE_ROLES, "nats-3s")  # "nats-60s" too with --long-outage
    cluster: int = 0  # 3: up --cluster 3, a nats fault kills one server (the log's leader)
    victim: str = "leader"  # on a cluster: kill the log's "leader" or a "follower" (a server not leading it)
    resubmit_share: float = 0.02  # of the claims accepted so far, resubmitted identical
    conflicting: bool = True  # ... and again with another spec (must be refused, claim untouched)
    fuzz: bool = True  # bad payloads to the intake
    forge: bool = True  # events forged on subjects their type does not belong on
    drain_s: float = 90.0
    data_dir: str = ""


async def run_chaos(options: Options, say=lambda _line: None) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpuledger-chaos-") as tmp:
        folder = Path(options.data_dir) if options.data_dir else Path(tmp) / "data"
        extra = ["--cluster", str(options.cluster)] if options.cluster else []
        say(f"starting gpuledger up --demo {' '.join(extra)} with {options.nodes} nodes in {folder}")
        stack = await start_stack(options.nodes, folder, extra_args=extra)
        restarts = fx.NatsRestarts()
        try:
            return await _on_stack(stack, options, restarts, say)
        finally:
            await stack.stop()
            restarts.stop_started()


async def _connect(url: str):
    async def quiet(_err) -> None:  # refused connections during an outage are the point of the run
        pass

    return await nats.connect(**connect_args(url), inbox_prefix=url_inbox_prefix(url),  # not the shared _INBOX.
                              max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                              allow_reconnect=True, error_cb=quiet)


async def _on_stack(stack, options: Options, restarts: fx.NatsRestarts, say) -> dict:
    ops, publisher = await _connect(stack.url), await _connect(stack.publisher_url)
    began = time.time()
    run_id = f"chaos-{int(began) % 100000}"
    start_seq = (await ops.jetstream().stream_info("GPULEDGER")).state.last_seq + 1
    submitter = Submitter(publisher, deadline=time.monotonic() + 600)
    watcher = Watcher(ops, options.hold_s)
    watching = asyncio.ensure_future(watcher.watch(start_seq))
    claims = claim_mix(run_id, options.claims)
    bursts = _split(claims, len(options.faults) + 1)
    done_faults: list[Fault] = []
    fuzz_report: dict[str, str] = {}
    rng = random.Random(7)
    try:
        for i, burst in enumerate(bursts):
            fault = options.faults[i] if i < len(options.faults) else ""
            say(f"burst {i + 1}/{len(bursts)}: {len(burst)} claims" + (f", fault {fault}" if fault else ""))
            publishing = asyncio.ensure_future(submitter.claims(burst, options.rate))
            await asyncio.sleep(len(burst) / options.rate / 2)
            if fault:
                done_faults.append(await _inject(stack, fault, restarts, options, ops))
            injected = time.time()
            await _hostile(submitter, watcher, claims, bursts[:i], run_id, rng, options, fuzz_report, i)
            await publishing
            if fault:  # one fault at a time: the next burst's waits for decisions to resume
                await watcher.decided_since(injected, RECOVERY_WAIT_S)
        drained = await _drain(watcher, submitter, options.drain_s)
        say("checking the log")
        check = await _check(ops, start_seq, submitter.accepted)
    finally:
        watching.cancel()
        watcher.stop()
        await asyncio.gather(watching, return_exceptions=True)
        await ops.close()
        await publisher.close()
    return _report(options, check, done_faults, submitter, watcher, drained, fuzz_report, stack, began)


def _split(claims: list[dict], parts: int) -> list[list[dict]]:
    size = max(1, -(-len(claims) // parts))
    return [claims[i:i + size] for i in range(0, len(claims), size)]


async def _inject(stack, fault: str, restarts: fx.NatsRestarts, options: Options, ops) -> Fault:
    if fault.startswith("nats-"):
        outage = float(fault.removeprefix("nats-").removesuffix("s"))
        return await _nats_outage(stack, outage, restarts, options.cluster, ops, options.victim)
    procs = fx.find(stack.pid, fault)
    at = time.time()
    for proc in procs:
        fx.kill9(proc)
    return Fault(f"kill -9 {fault}" + ("" if procs else " (not found)"), at, at)


async def _nats_outage(stack, outage: float, restarts: fx.NatsRestarts, cluster: int, ops,
                       victim_kind: str = "leader") -> Fault:
    """kill -9 a nats-server (on a cluster, the one leading the log) for `outage` seconds. `up` is
    paused meanwhile (SIGSTOP) so its supervisor cannot start the server again before the outage
    is over; once it runs again it restarts the server itself, else (an `up` that does not
    supervise nats-server) this run does, with the same command line."""
    servers = fx.find(stack.pid, "nats-server") or _restarted(restarts)
    victim = servers[0] if servers else None
    if cluster and servers:
        leader = await _log_leader(ops, servers)
        if victim_kind == "follower":
            victim = next((p for p in servers if p is not leader), victim)
        else:
            victim = leader or victim
    what = (f"the log's {victim_kind} of {cluster}") if cluster else "the only server"
    if victim is None:
        at = time.time()
        return Fault(f"nats-server {outage:g}s outage (not found)", at, at)
    os.kill(stack.pid, signal.SIGSTOP)
    try:
        at = time.time()
        fx.kill9(victim)
        await asyncio.sleep(outage)
    finally:
        os.kill(stack.pid, signal.SIGCONT)
    if not await _listening_within(victim.client_port, UP_RESTART_GRACE_S):
        await asyncio.to_thread(restarts.restart, victim)
    return Fault(f"kill -9 nats-server ({what}), {outage:g}s outage", at, time.time())


async def _listening_within(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if fx.listening(port):
            return True
        await asyncio.sleep(0.1)
    return False


def _restarted(restarts: fx.NatsRestarts) -> list[fx.Proc]:
    """nats-servers this run restarted earlier (children of this process, not of `up`)."""
    return [fx.Proc(c.pid, tuple(c.args)) for c in restarts.started if c.poll() is None]


async def _log_leader(ops, servers: list[fx.Proc]) -> fx.Proc | None:
    try:
        leader = (await ops.jetstream().stream_info("GPULEDGER")).cluster.leader
    except Exception:
        return None
    return next((p for p in servers if "-n" in p.argv and p.argv[p.argv.index("-n") + 1] == leader), None)


async def _hostile(submitter: Submitter, watcher: Watcher, claims, earlier, run_id, rng, options,
                   report: dict, burst: int) -> None:
    """Resubmits of claims already accepted (identical, then with another spec), bad payloads to
    the intake, and (once, when an allocation shows a real device) forged events."""
    done = [c for part in earlier for c in part if c["claim_id"] in submitter.accepted]
    for claim in rng.sample(done, min(len(done), max(1, int(len(done) * options.resubmit_share)))) if done else []:
        await submitter.publish(claim["claim_id"] + "-again", msgspec.json.encode(claim), retry=False)
        if not options.conflicting:
            continue
        other = dict(claim, gpus=3, namespace="chaos-conflict")
        await submitter.publish(claim["claim_id"] + "-other", msgspec.json.encode(other), retry=False)
    if options.fuzz:
        for kind, payload in bad_intake_payloads(run_id, rng):
            error = await submitter.publish(f"{run_id}-{kind}-{burst}", payload, retry=False)
            report[f"intake:{kind}"] = "stored in the intake" if not error else f"refused: {error[:80]}"
    if options.forge and burst == 1 and watcher.allocated:
        sample = next(iter(watcher.allocated.values()))
        js = submitter.nc.jetstream()
        for kind, subject, payload in forged_events(run_id, sample.node, sample.grants[0].uuid):
            try:
                await js.publish(subject, payload, timeout=2.0)
                report[f"forged:{kind}"] = "stored in the log"
            except Exception as err:
                report[f"forged:{kind}"] = f"refused: {type(err).__name__}: {str(err)[:60]}"


async def _drain(watcher: Watcher, submitter: Submitter, timeout: float) -> bool:
    """Until every accepted claim is settled (allocated or refused), or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if submitter.accepted <= watcher.settled:
            await asyncio.sleep(2.0)  # the last bindings and releases land
            return True
        await asyncio.sleep(0.5)
    return False


async def _check(ops, start_seq: int, accepted: set[str]) -> ChaosCheck:
    """The whole log from the run's start, folded by the independent checker (retried while a
    server is still coming back)."""
    for attempt in range(10):
        check = ChaosCheck(accepted=set(accepted))
        try:
            log = JetStreamEventLog(ops)
            async for batch in log.follow_raw(start_seq, stop_at=await log.last_seq()):
                check.fold((seq, subject, data) for seq, subject, data, _headers in batch)
            return check
        except Exception:
            await asyncio.sleep(1.0 + attempt)
    raise RuntimeError("could not read the log back after 10 attempts")


def _restarts(data_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        text = (data_dir / "up.log").read_text(errors="replace")
    except OSError:
        return counts
    for line in text.splitlines():
        name = restarted(line)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _report(options: Options, check: ChaosCheck, faults: list[Fault], submitter: Submitter,
            watcher: Watcher, drained: bool, fuzz_report: dict, stack, began: float) -> dict:
    end = max([began, *check.decision_times, *check.settled_at.values(), time.time()])
    timeline = stall_figures(check.waiting_since, check.settled_at, check.decision_times, faults, end)
    figures = check.figures()
    return {
        "claims": options.claims, "accepted": len(submitter.accepted),
        "publish_failed": len(submitter.failed), "publish_retries": submitter.retries,
        "lost": figures["lost"], "duplicated": figures["duplicated"],
        "double_booked": figures["double_booked"], "bound_void": figures["bound_void"],
        "stalled": timeline["stalled_s"], "recovery_s": timeline["recovery_s"],
        "longest_gap_s": timeline["longest_gap_s"], "bound_detail": figures["bound_detail"],
        "duplicated_detail": figures["duplicated_detail"],
        "clobbered": figures["clobbered"], "undecodable_stored": figures["undecodable"],
        "forged_stored": figures["forged_stored"], "lost_sample": figures["lost_sample"],
        "drained": drained, "release_errors": len(watcher.release_errors),
        "restarts": _restarts(stack.data_dir), "hostile": fuzz_report,
        "faults": [f.name for f in faults],
        "fault_at_s": {f.name: round(f.at - began, 2) for f in faults},  # since the run began
        "stalls_at_s": [[round(a - began, 2), length] for a, length in timeline["stalls"]], "cluster": options.cluster, "nodes": options.nodes,
        "rate": options.rate, "log_messages": figures["messages"], "commit": _commit(),
        "wall_s": round(time.time() - began, 1),
    }
