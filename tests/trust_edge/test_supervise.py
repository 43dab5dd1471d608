"""`gpuledger up` restarts what dies and says so: the Supervisor's rules on a fake clock, and a
real stack whose allocator and nats-server are killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from gpuledger_cli.up_supervise import DELAYS_S, MAX_RESTARTS, STABLE_S, Supervisor, Unit
from tests.trust_edge.outage import UpProcess, outcomes, submit_retrying


class Fake:
    def __init__(self):
        self.now, self.code, self.starts, self.said = 0.0, None, 0, []

    def unit(self) -> Unit:
        def start():
            self.starts += 1
            self.code = None
        return Unit("svc", lambda: self.code, start, "svc.log")

    def supervisor(self) -> Supervisor:
        return Supervisor([self.unit()], self.said.append, clock=lambda: self.now)


def test_a_death_is_said_and_restarted_after_a_growing_pause():
    fake = Fake()
    sup = fake.supervisor()
    for death in range(1, 4):
        fake.code = -9
        assert sup.step()
        assert f"svc was killed by signal 9; restarting it in {DELAYS_S[death - 1]:g} s" in fake.said[-1]
        fake.now += DELAYS_S[death - 1] - 0.01
        sup.step()
        assert fake.starts == death - 1, "not before its pause"
        fake.now += 0.02
        sup.step()
        assert fake.starts == death


def test_a_crash_loop_gives_up_and_a_stable_run_forgives():
    fake = Fake()
    sup = fake.supervisor()
    for _ in range(MAX_RESTARTS):
        fake.code = 1
        assert sup.step()
        fake.now += DELAYS_S[-1]
        sup.step()
    fake.now += STABLE_S  # ran long enough: earlier deaths forgiven
    assert sup.step()
    fake.code = 3
    assert sup.step() and "restart 1 of" in fake.said[-1]
    for _ in range(MAX_RESTARTS):
        fake.now += DELAYS_S[-1]
        sup.step()
        fake.code = 3
        ok = sup.step()
    assert not ok and "giving up" in fake.said[-1] and "svc.log" in fake.said[-1]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_up_restarts_a_killed_service_and_a_killed_nats_server(tmp_path):
    stack = UpProcess("--demo", "--fleet", "1xH100x8", "--no-dashboard", "--data-dir", str(tmp_path))
    try:
        os.kill(stack.child_pid("service allocator"), signal.SIGKILL)
        assert "restarting" in stack.wait_said("allocator was killed by signal 9")
        os.kill(stack.child_pid("nats-server"), signal.SIGKILL)
        assert "restarting" in stack.wait_said("nats-server was killed by signal 9")
        publisher = stack.lines["GPULEDGER_PUBLISHER_URL"]
        asyncio.run(submit_retrying(publisher, ["after-kills"]))
        assert asyncio.run(outcomes(publisher, ["after-kills"])) == {"after-kills": "bound"}
        assert stack.proc.poll() is None
    finally:
        stack.stop()


def test_the_restart_line_is_read_back_by_name():
    from gpuledger_cli.up_supervise import describe, restarted

    fake = Fake()
    sup = fake.supervisor()
    fake.code = -9
    sup.step()
    assert restarted("gpuledger: " + fake.said[-1]) == "svc"
    assert restarted(f"gpuledger: nats-server n1 {describe(1)}; restarting it in 1 s") == "nats-server n1"
    assert restarted("gpuledger: stopping") is None
