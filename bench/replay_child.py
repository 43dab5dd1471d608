"""The full rebuild of `gpuledger bench replay`, in a process of its own.

Run as `python -m bench.replay_child NATS_URL END`: connects, rebuilds the allocator's state from the
stream (`bench.replay.rebuild`, the allocator's own start path) and prints one JSON line with the
seconds to caught up, the seconds until the claims the catch-up dropped were freed, the process's
peak resident memory, and a digest of the rebuilt state for the parent to check against its live
fold. A process of its own, so that its peak memory is the rebuild's alone: the benchmark's own
process also holds the generator's fold of every claim and the log it wrote.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import sys
import time

from bench.e2e.cpu import run_delay
from shared import readahead
from shared.jetstream import JetStreamEventLog, connect
from shared.settings import Settings

from ledger.digest import compact_digest


def peak_rss_mb() -> float:
    """This process's peak resident set so far: Linux's VmHWM, which starts again at exec (the
    `ru_maxrss` of a child keeps its parent's peak from before the exec: the generator's here)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def state_digest(state) -> str:
    return hashlib.sha256(repr(compact_digest(state)).encode()).hexdigest()


async def main(url: str) -> dict:
    from bench.replay import rebuild

    nc = await connect(url, name="bench-replay-rebuild")
    try:
        before = peak_rss_mb()  # the interpreter and its imports, before any event is read
        cpu, helpers, ready = time.process_time(), _children_cpu(), {}
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        delay = run_delay(os.getpid())
        state, seconds, freed_s = await rebuild(JetStreamEventLog(nc), Settings(nats_url=url), cpu=ready)
        # seconds this process was ready to run and waited for a CPU (to freed: its helper and
        # nats-server run beside it, three on two cores), 0 where the kernel keeps no schedstat
        delay = run_delay(os.getpid()) - delay
        read = readahead.last_read
        # CPU seconds to caught up and freed: this process's, and its read-ahead helper's
        cpu, helpers = time.process_time() - cpu, _children_cpu() - helpers
        return {"seconds": seconds, "freed_s": freed_s, "cpu_s": round(cpu, 2),
                "cpu_ready_s": round(ready["ready"], 2),
                "helper_cpu_s": round(helpers, 2),
                # seconds the rebuild waited for its read-ahead helper's frames (its side was the
                # slower then), for the first of them (the helper's start), and folded after the
                # helper had written its last frame (the read's tail)
                "helper_waited_s": round(read["waited_s"], 3),
                "helper_first_waited_s": round(read["first_waited_s"], 3),
                "run_queue_wait_s": round(delay, 3),
                "after_helper_s": round(ready["ready_at"] - read["ended_at"], 3) if read["ended_at"] else None,
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "rss_before_mb": round(before, 1), "claims_held": len(state.claims),
                # pages first touched (the heap's growth): each a trap into the kernel
                "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                "digest": state_digest(state)}
    finally:
        await nc.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
