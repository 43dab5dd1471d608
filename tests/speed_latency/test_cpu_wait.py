"""`bench e2e` reports, beside each process's CPU, how long its threads waited for a CPU while ready
to run (bench/e2e/cpu.py, from /proc schedstat): two busy processes sharing one core each wait
for the other."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.e2e.cpu import CpuMeter, run_delay

BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"),
                    reason="no schedstat in /proc")
def test_two_busy_processes_on_one_core_each_wait_for_a_cpu():
    core = min(os.sched_getaffinity(0))
    meter = CpuMeter(os.getpid())
    meter.start()
    children = [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=lambda: os.sched_setaffinity(0, {core}))
                for _ in range(2)]
    try:
        while any(child.poll() is None for child in children):
            meter.sample()  # read while they are alive: /proc forgets them once reaped
            time.sleep(0.02)
    finally:
        for child in children:
            child.wait()
    waited = meter.waits_by_role()
    used = meter.seconds_by_role()
    assert sum(used.values()) > 0
    assert sum(waited.values()) > 0  # each was ready while the other held the core
    assert sum(meter.slices_by_role().values()) >= 2  # each was put on the core at least once
    assert run_delay(os.getpid()) >= 0
