"""`up`'s lower priority for the processes off the claim path reaches their session's share of the
CPU too (shared/priority.py): where the kernel groups processes by session (autogroup), each
process `up` starts leads a session of its own, and a thread's nice value weighs only within it.
Niced threads alone left every service competing with the claim path at full weight."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuledger_cli.up import Child
from gpuledger_cli.up_nice import NICE


def _in_an_autogroup() -> bool:
    """The file exists on every kernel built with autogroups, but it is empty where this process's
    CPU share is set by a cgroup of its own rather than by its session (a container, a CI runner):
    there no session's nice weighs anything, and lower_session leaves it alone (returns None)."""
    try:
        with open("/proc/self/autogroup") as f:
            return "nice" in f.read()
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _in_an_autogroup(),
                                reason="this process is in no autogroup (no autogroups, or its CPU share "
                                       "is a cgroup's): session nice values weigh nothing here")


def _session_nice(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/autogroup") as f:
        return int(f.read().rsplit("nice", 1)[1])


def test_a_child_started_lowered_lowers_its_session(tmp_path):
    child = Child("node-agents", [sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ), tmp_path)
    child.start()
    try:
        time.sleep(0.2)
        assert _session_nice(child.process.pid) == min(_session_nice() + NICE["node-agents"], 19)
    finally:
        child.process.kill()
        child.process.wait()


LOWER = """
import os
from shared.priority import lower_when_ready
lower_when_ready({"GPULEDGER_NICE_WHEN_READY": "7"})
print(open("/proc/self/autogroup").read().rsplit("nice", 1)[1].strip())
"""


def test_a_service_lowering_itself_when_ready_lowers_its_session_and_no_one_elses():
    mine = _session_nice()
    led = subprocess.run([sys.executable, "-c", LOWER], capture_output=True, text=True, check=True,
                         start_new_session=True)
    assert int(led.stdout) == min(mine + 7, 19)
    # a process in its parent's session (this test's) lowers its own threads only
    shared = subprocess.run([sys.executable, "-c", LOWER], capture_output=True, text=True, check=True)
    assert int(shared.stdout) == mine and _session_nice() == mine
