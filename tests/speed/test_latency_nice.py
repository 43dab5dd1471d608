"""`gpuledger up` runs the processes off the claim path (projector, quota, pool-controller,
node agents, dashboard) at a lower CPU priority, the claim path (claim, allocator) at its own;
GPULEDGER_UP_NICE=0 starts every one at the same priority. The services among them start at full
priority and lower it themselves once ready (their start is not slowed by it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuledger_cli.up import Child
from gpuledger_cli.up_nice import NICE
from shared.service import READY_SUBJECT
from shared.priority import NICE_WHEN_READY_ENV, lower_when_ready

ROOT = Path(__file__).resolve().parents[2]


def _priority_of_started(name: str, env: dict[str, str], tmp_path, service: bool = False) -> int:
    child = Child(name, [sys.executable, "-c", "import time; time.sleep(30)"], env, tmp_path, service=service)
    child.start()
    try:
        return os.getpriority(os.PRIO_PROCESS, child.process.pid)
    finally:
        child.process.kill()
        child.process.wait()


@pytest.mark.parametrize("name", ["node-agents", "dashboard"])
def test_agents_and_dashboard_start_at_a_lower_priority(name, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert NICE[name] > 0
    assert _priority_of_started(name, dict(os.environ), tmp_path) == min(mine + NICE[name], 19)


@pytest.mark.parametrize("name", ["projector", "quota", "pool-controller"])
def test_services_off_the_claim_path_start_at_full_priority_and_are_told_what_to_lower(name, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    child = Child(name, ["true"], dict(os.environ), tmp_path, service=True)
    assert child.env[NICE_WHEN_READY_ENV] == str(NICE[name])
    assert _priority_of_started(name, dict(os.environ), tmp_path, service=True) == mine


@pytest.mark.parametrize("name", ["claim", "allocator"])
def test_the_claim_path_keeps_its_priority(name, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priority_of_started(name, dict(os.environ), tmp_path, service=True) == mine
    assert NICE_WHEN_READY_ENV not in Child(name, ["true"], dict(os.environ), tmp_path, service=True).env


def test_every_process_at_the_same_priority_when_asked(tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    env = dict(os.environ, GPULEDGER_UP_NICE="0")
    assert _priority_of_started("projector", env, tmp_path) == mine
    assert NICE_WHEN_READY_ENV not in Child("projector", ["true"], env, tmp_path, service=True).env


def test_lowering_reaches_every_thread_started_before(tmp_path):
    """Linux keeps a nice value per thread: a thread that runs before the service is ready (an
    exporter, a metrics server) is lowered too. In a child process: a lowered priority cannot be
    raised back without privileges."""
    script = """
import os, threading, time
from shared.service import READY_SUBJECT
from shared.priority import lower_when_ready
started = threading.Event()
threading.Thread(target=lambda: (started.set(), time.sleep(30)), daemon=True).start()
started.wait()
before = os.getpriority(os.PRIO_PROCESS, 0)
print(lower_when_ready({"GPULEDGER_NICE_WHEN_READY": "7"}))
print(sorted({(before, int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16]))
              for t in os.listdir("/proc/self/task")}))
print(len(os.listdir("/proc/self/task")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout.split("\n")
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert out[0] == "7"
    assert out[1] == str([(before, min(before + 7, 19))])  # every thread at the lowered value
    assert int(out[2]) >= 2


@pytest.mark.parametrize("raw", ["", "0", "-3", "ten"])
def test_no_or_a_bad_increment_changes_nothing(raw):
    assert lower_when_ready({NICE_WHEN_READY_ENV: raw}) == 0
    assert lower_when_ready({}) == 0


def _nice_of_every_thread(pid: int) -> set[int]:
    values = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            values.add(int(open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16]))
        except OSError:  # a thread that ended meanwhile
            continue
    return values


async def test_a_real_service_lowers_itself_once_ready(fresh_nats, fresh_client, tmp_path):
    """The quota service as `up` starts it: ready at full priority, then every thread lowered."""
    import asyncio

    ready = asyncio.Event()

    async def on_ready(msg) -> None:
        ready.set()

    await fresh_client.subscribe(f"{READY_SUBJECT}.quota", cb=on_ready)
    await fresh_client.flush()
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    env = dict(os.environ, GPULEDGER_NATS_URL=fresh_nats.url, PYTHONPATH=str(ROOT))
    env.pop("GPULEDGER_METRICS_PORT", None)
    child = Child("quota", [sys.executable, "-m", "gpuledger_cli.main", "service", "quota"], env, tmp_path,
                  service=True)
    child.start()
    try:
        await asyncio.wait_for(ready.wait(), 120)
        for _ in range(200):  # it lowers itself right after the announcement
            if _nice_of_every_thread(child.process.pid) == {min(mine + NICE["quota"], 19)}:
                break
            await asyncio.sleep(0.05)
        assert _nice_of_every_thread(child.process.pid) == {min(mine + NICE["quota"], 19)}
    finally:
        child.stop()
        child.wait(time.monotonic() + 10)
