"""The figures of one run, and the table of a sweep."""

from __future__ import annotations

from bench.e2e.check import Checker
from bench.e2e.cpu import CpuMeter
from bench.e2e.follow import Follower
from bench.e2e.load import Publisher


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def sustained_rate(times: list[float]) -> float:
    """Allocations per second between the 10th and the 90th percentile allocation: the steady
    part of the run, without the start and the tail."""
    if len(times) < 10:
        return 0.0
    ordered = sorted(times)
    lo, hi = int(0.1 * len(ordered)), int(0.9 * len(ordered))
    span = ordered[hi] - ordered[lo]
    return (hi - lo) / span if span > 0 else 0.0


def _messages(checker: Checker, claims: int) -> dict[str, float]:
    """Messages the run stored in the event stream per claim published, by kind of subject."""
    per = {kind: round(n / max(claims, 1), 3) for kind, n in checker.messages.most_common()}
    return {"total": round(sum(checker.messages.values()) / max(claims, 1), 3), **per}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 2)


def figures(options, rate: float | None, follower: Follower, publisher: Publisher, checker: Checker,
            meter: CpuMeter, idle: dict[str, float], client_cpu_s: float, publish_s: float,
            wall_s: float, client_wait_s: float = 0.0) -> dict:
    found = checker.counted.figures()
    published = publisher.acked
    times = [follower.claims[c] for c in published]
    latencies = [t.allocated - t.submitted for t in times if t.allocated is not None]
    decided = checker.counted.decided
    per_claim = 1000 / max(len(published), 1)
    cpu = {name: round(used * per_claim, 3) for name, used in sorted(meter.seconds_by_role().items())}
    cpu = {"total": round(sum(cpu.values()), 3), **cpu}
    waits = {name: round(w * per_claim, 3) for name, w in sorted(meter.waits_by_role().items())}
    waits = {"total": round(sum(waits.values()), 3), **waits}
    slices = {name: round(n / max(len(published), 1), 2) for name, n in sorted(meter.slices_by_role().items())}
    slices = {"total": round(sum(slices.values()), 2), **slices}
    restarts = meter.restarts()
    return {
        "claims": len(times), "rate": rate, "nodes": options.nodes,
        "claims_per_s": round(sustained_rate([t.allocated for t in times if t.allocated is not None]), 1),
        "offered_per_s": round(len(published) / publish_s, 1) if publish_s > 0 else None,
        "p50_ms": _ms(percentile(latencies, 50)), "p99_ms": _ms(percentile(latencies, 99)),
        "max_ms": _ms(max(latencies, default=None)),
        "lost": sum(1 for c in published if c not in decided),
        "allocated": sum(1 for t in times if t.allocated is not None),
        "rejected": sum(1 for t in times if t.rejected),
        "double_booked": found["double_booked"], "void_allocations": found["void_allocations"],
        "bindings": found["bindings"], "bound_void": found["bound_void"],
        "bound_after_end": found["bound_after_end"],
        "bound_after_end_reallocated": found["bound_after_end_reallocated"], "bound_foreign": found["bound_foreign"],
        "bound_twice": found["bound_twice"], "leftover_workloads": checker.leftover_workloads(),
        "cpu_ms_per_claim": cpu,
        # time the stack's processes were ready to run and waited for a CPU (bench/e2e/cpu.py)
        "cpu_wait_ms_per_claim": waits,
        "client_cpu_wait_ms_per_claim": round(client_wait_s * per_claim, 3),
        # times each process was put on a CPU per claim: its wake-ups, mostly (bench/e2e/cpu.py)
        "cpu_slices_per_claim": slices,
        "messages_per_claim": _messages(checker, len(published)),
        "idle_cpu_ms_per_s": {name: round(1000 * v, 1) for name, v in sorted(idle.items())},
        "agent_restarts": restarts.pop("node-agents", 0), "service_restarts": restarts,
        "publish_failed": len(publisher.failed), "publish_retries": publisher.retried,
        "publish_lag_max_ms": _ms(publisher.lag_max_s), "release_errors": len(follower.release_errors),
        "client_cpu_ms_per_claim": round(client_cpu_s * per_claim, 3),
        "wall_s": round(wall_s, 2),
    }


COLUMNS = (("rate", "offered/s"), ("offered_per_s", "published/s"), ("claims_per_s", "allocated/s"),
           ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("lost", "lost"), ("double_booked", "double"),
           ("bound_void", "bound void"), ("cpu_total", "CPU ms/claim"), ("agent_restarts", "agent restarts"))


def table(results: list[dict]) -> str:
    """A markdown table of a sweep, one row per rate."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + " --- |" * len(COLUMNS)]
    for result in results:
        row = dict(result, cpu_total=result["cpu_ms_per_claim"]["total"], rate=result["rate"] or "max")
        lines.append("| " + " | ".join(str(row.get(key)) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def path_table(path: dict[str, dict]) -> str:
    """A markdown table of a run's `hop_path_ms`: each hop's p50, p90, p99 and mean, and its share
    of the summed means."""
    total = sum(hop.get("mean", 0.0) for hop in path.values()) or 1.0
    lines = ["| hop | claims | p50 ms | p90 ms | p99 ms | mean ms | share |", "|" + " --- |" * 7]
    for name, hop in path.items():
        if not hop.get("claims"):
            lines.append(f"| {name} | 0 | | | | | |")
            continue
        lines.append(f"| {name} | {hop['claims']} | {hop['p50']} | {hop['p90']} | {hop['p99']} | "
                     f"{hop['mean']} | {100 * hop['mean'] / total:.0f} % |")
    lines.append(f"| total (sum of means) | | | | | {round(total, 3)} | |")
    return "\n".join(lines)


def tail_table(tail: dict, waits: dict[str, dict[str, float]]) -> str:
    """A markdown table of a run's `tail` (each hop's mean over the slowest claims and over all)
    and `tail_cpu_wait_ms_per_s` (each process's wait for a CPU while they passed, and overall)."""
    if not tail.get("claims"):
        return "no tail: no claim had every stamp"
    lines = [f"slowest {tail['claims']} claims (>= {tail['threshold_ms']} ms), published in {tail['windows']} "
             f"windows of {tail['window_s']} s (the largest: {tail['largest_window']['claims']} claims at "
             f"{tail['largest_window']['at_s']} s)",
             "| hop | tail mean ms | all mean ms |", "| --- | --- | --- |"]
    late = tail.get("published_late_ms")
    if late:
        lines.append(f"| published after its time (the publisher behind) | {late['tail']} | {late['all']} |")
    lines += [f"| {name} | {hop['tail']} | {hop['all']} |" for name, hop in tail["hops_ms"].items()]
    lines += ["| process | CPU wait ms/s, tail | all |", "| --- | --- | --- |"]
    lines += [f"| {name} | {w.get('tail', 0.0)} | {w.get('all', 0.0)} |"
              for name, w in sorted(waits.items(), key=lambda item: -item[1].get("tail", 0.0))]
    return "\n".join(lines)
