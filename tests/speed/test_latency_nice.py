"""`gpuledger up` starts the processes off the claim path (projector, quota, pool-controller,
node agents, dashboard) at a lower CPU priority, the claim path (claim, allocator) at its own;
GPULEDGER_UP_NICE=0 starts every one at the same priority."""

from __future__ import annotations

import os
import sys

import pytest

from gpuledger_cli.up import Child
from gpuledger_cli.up_nice import NICE


def _priority_of_started(name: str, env: dict[str, str], tmp_path) -> int:
    child = Child(name, [sys.executable, "-c", "import time; time.sleep(30)"], env, tmp_path)
    child.start()
    try:
        return os.getpriority(os.PRIO_PROCESS, child.process.pid)
    finally:
        child.process.kill()
        child.process.wait()


@pytest.mark.parametrize("name", ["projector", "quota", "pool-controller", "node-agents", "dashboard"])
def test_processes_off_the_claim_path_run_at_a_lower_priority(name, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert NICE[name] > 0
    assert _priority_of_started(name, dict(os.environ), tmp_path) == min(mine + NICE[name], 19)


@pytest.mark.parametrize("name", ["claim", "allocator"])
def test_the_claim_path_keeps_its_priority(name, tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priority_of_started(name, dict(os.environ), tmp_path) == mine


def test_every_process_at_the_same_priority_when_asked(tmp_path):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    env = dict(os.environ, GPULEDGER_UP_NICE="0")
    assert _priority_of_started("projector", env, tmp_path) == mine
