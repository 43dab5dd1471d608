"""`gpuledger up --demo` with NATS users on, as it runs by default: anonymous clients refused, a
publisher submits through the intake with its own URL and reads the outcome, ops (the CLI) sees
and releases the claim, and no service was refused anything it needed on the way."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from schemas import subjects

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
BIN = Path(sys.executable).parent / "gpuledger"
FLEET = "2xH100x8"


class AuthStack:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.proc = subprocess.Popen([str(BIN), "up", "--demo", "--fleet", FLEET, "--no-dashboard",
                                      "--data-dir", str(data_dir)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: dict[str, str] = {}
        while "GPULEDGER_PUBLISHER_URL" not in self.lines:
            line = self.proc.stdout.readline().strip()
            if "=" not in line:
                self.proc.kill()
                raise AssertionError(f"up printed {line!r}; stderr: {self.proc.stderr.read()}")
            name, value = line.split("=", 1)
            self.lines[name] = value

    def cli(self, *args: str) -> str:
        env = dict(os.environ, GPULEDGER_NATS_URL=self.lines["GPULEDGER_NATS_URL"])
        done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return done.stdout

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)

    def violations(self) -> list[str]:
        log = (self.data_dir / "nats" / "nats-server.log").read_text()
        return [line for line in log.splitlines() if "violation" in line.lower()]


async def outcome_of(url: str, claim_id: str, wanted: set[str]) -> dict:
    """The claim's outcome as a publisher reads it (direct get), once its status is in `wanted`."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        deadline = time.monotonic() + 60
        seen = {}
        while time.monotonic() < deadline:
            try:
                msg = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id), direct=True)
                seen = json.loads(msg.data)
                if seen["status"] in wanted:
                    return seen
            except nats.js.errors.NotFoundError:
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"{claim_id} never reached {wanted}: last outcome {seen}")
    finally:
        await nc.close()


async def submit_as_publisher(url: str, claim: dict) -> None:
    nc = await nats.connect(url)
    ack = await nc.jetstream().publish(subjects.INTAKE_CLAIMS, json.dumps(claim).encode(),
                                       headers={"Nats-Msg-Id": claim["claim_id"]})
    assert ack.stream == subjects.INTAKE_STREAM
    await nc.close()


async def anonymous_refused(port: int) -> bool:
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0,
                                connect_timeout=2)
    except Exception:
        return True
    await nc.close()
    return False


def test_up_runs_with_users_and_the_claim_path_works(tmp_path):
    stack = AuthStack(tmp_path / "data")
    try:
        ops_url, publisher_url = stack.lines["GPULEDGER_NATS_URL"], stack.lines["GPULEDGER_PUBLISHER_URL"]
        assert ops_url.startswith("nats://ops:") and publisher_url.startswith("nats://publisher:")
        port = int(ops_url.rsplit(":", 1)[1])
        assert asyncio.run(anonymous_refused(port))
        assert (tmp_path / "data" / "nats-users.json").stat().st_mode & 0o777 == 0o600

        claim = {"claim_id": "auth-1", "namespace": "team-a", "gpus": 2, "models": ["H100"]}
        asyncio.run(submit_as_publisher(publisher_url, claim))
        bound = asyncio.run(outcome_of(publisher_url, "auth-1", {"bound"}))
        assert len(bound["devices"]) == 2 and bound["node"]
        assert json.loads(stack.cli("claim", "get", "auth-1", "--json"))["status"] == "bound"
        stack.cli("claim", "release", "auth-1")
        assert asyncio.run(outcome_of(publisher_url, "auth-1", {"released"}))["final"]
        assert stack.violations() == []
    finally:
        stack.stop()
    assert stack.proc.returncode == 0

    again = AuthStack(tmp_path / "data")  # the same users and secrets after a restart
    try:
        assert again.lines["GPULEDGER_PUBLISHER_URL"] == publisher_url
        assert json.loads(again.cli("claim", "get", "auth-1", "--json"))["status"] == "released"
    finally:
        again.stop()
