"""`gpuledger up --demo` as a user runs it: the CLI claim path, a raw nats-py publish of the
README's JSON, a restart keeping state, and a clean stop on SIGINT."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
BIN = Path(sys.executable).parent / "gpuledger"


class Stack:
    def __init__(self, data_dir: Path):
        self.proc = subprocess.Popen([str(BIN), "up", "--demo", "--data-dir", str(data_dir)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("GPULEDGER_NATS_URL="):
            self.proc.kill()
            raise AssertionError(f"no URL line: {line!r}; stderr: {self.proc.stderr.read()}")
        self.url = line.split("=", 1)[1]

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, GPULEDGER_NATS_URL=self.url)
        done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"{args}: {done.stderr}")
        return done

    def stop(self) -> float:
        started = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        return time.monotonic() - started


def children_of(pid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return out.split()


def test_demo_stack_end_to_end(tmp_path):
    stack = Stack(tmp_path / "data")
    try:
        got = json.loads(stack.cli("claim", "submit", "--namespace", "team-a", "--gpus", "2", "--model", "H100",
                                   "--wait", "30", "--json", "--id", "e2e-1").stdout)
        assert got["status"] in ("allocated", "bound")
        assert len(got["devices"]) == 2 and all("uuid" in d and "index" in d for d in got["devices"])
        assert got["env"]["CUDA_VISIBLE_DEVICES"].count(",") == 1

        bad = stack.cli("claim", "submit", "--namespace", "team-a", "--gpus", "2", "--gpu-milli", "500", check=False)
        assert bad.returncode == 1 and "gpus" in bad.stderr

        asyncio.run(publish_readme_claim(stack.url))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            raw = json.loads(stack.cli("claim", "get", "readme-1", "--json", check=False).stdout or "{}")
            if raw.get("status") in ("allocated", "bound"):
                break
            time.sleep(0.5)
        assert raw.get("status") in ("allocated", "bound"), raw

        listed = json.loads(stack.cli("claim", "list", "--json").stdout)
        assert {"e2e-1", "readme-1"} <= {c["claim_id"] for c in listed}
        # every new claim is on the submit subject (session 34 on; a claim alone was on its own before)
        replay = stack.cli("events", "replay", "--subject", "gpu.evt.submit", "--json").stdout.splitlines()
        assert any(json.loads(line)["event"]["type"] == "ClaimSubmitted" for line in replay)
        assert stack.cli("claim", "release", "e2e-1").returncode == 0
    finally:
        seconds = stack.stop()
    assert stack.proc.returncode == 0
    print(f"up stopped every process in {seconds:.1f} s")  # wall clock: reported, not asserted
    assert children_of(stack.proc.pid) == []

    again = Stack(tmp_path / "data")  # data survives: the same claims, the same devices
    try:
        kept = json.loads(again.cli("claim", "get", "readme-1", "--json").stdout)
        assert kept["status"] in ("allocated", "bound") and kept["devices"] == raw["devices"]
        released = json.loads(again.cli("claim", "get", "e2e-1", "--json").stdout)
        assert released["status"] == "released"
    finally:
        again.stop()


async def publish_readme_claim(url: str) -> None:
    """The README's snippet for systems that publish claims without our CLI."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    claim = {"claim_id": "readme-1", "namespace": "team-b", "gpus": 1, "models": ["H100"]}
    ack = await js.publish("gpu.intake.claim", json.dumps(claim).encode(), headers={"Nats-Msg-Id": claim["claim_id"]})
    assert ack.stream == "GPULEDGER_INTAKE"
    await nc.close()
