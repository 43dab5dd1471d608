"""A `gpuledger up` stack run as a user would, with its stderr read as it comes, and a client that
submits claims through the intake, retrying while NATS is away."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nats

from schemas import subjects

BIN = Path(sys.executable).parent / "gpuledger"
DECIDED = {"bound", "rejected", "lost", "released", "evicted", "expired"}  # bound, or ended


class UpProcess:
    def __init__(self, *args: str, last: str = "GPULEDGER_PUBLISHER_URL", env: dict[str, str] | None = None):
        """Run `gpuledger up ARGS`; ready once it printed the line named `last`."""
        self.proc = subprocess.Popen([str(BIN), "up", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True, env=dict(os.environ, **(env or {})))
        self.lines: dict[str, str] = {}
        self.said: list[str] = []
        self._said_changed = threading.Condition()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        while last not in self.lines:
            line = self.proc.stdout.readline().strip()
            if "=" not in line:
                self.proc.kill()
                raise AssertionError(f"up printed {line!r}; stderr: {self.said}")
            name, value = line.split("=", 1)
            self.lines[name] = value

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            with self._said_changed:
                self.said.append(line.rstrip("\n"))
                self._said_changed.notify_all()

    def wait_said(self, *words: str, timeout: float = 60) -> str:
        """The first stderr line holding every word, waiting for it to come."""
        deadline = time.monotonic() + timeout
        with self._said_changed:
            while True:
                found = [line for line in self.said if all(w in line for w in words)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"up never said {words}; it said: {self.said}")
                self._said_changed.wait(left)

    @property
    def url(self) -> str:
        return self.lines["GPULEDGER_NATS_URL"]

    def child_pid(self, marker: str) -> int:
        out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(self.proc.pid)], capture_output=True,
                             text=True).stdout
        pids = [int(line.split()[0]) for line in out.splitlines() if marker in line]
        assert pids, f"no child of up runs {marker!r}: {out}"
        return pids[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)


async def submit_retrying(url: str, claim_ids: list[str]) -> None:
    """Publish each claim to the intake, waiting out a NATS that is not there (as a client should:
    the same Nats-Msg-Id each time, so a retry that was stored after all is stored once)."""
    for claim_id in claim_ids:
        body = json.dumps({"claim_id": claim_id, "namespace": "outage", "gpus": 1}).encode()
        while True:
            try:
                nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=1,
                                        error_cb=_ignore)
                try:
                    await nc.jetstream().publish(subjects.INTAKE_CLAIMS, body, timeout=2,
                                                 headers={"Nats-Msg-Id": claim_id})
                finally:
                    await nc.close()
                break
            except Exception:
                await asyncio.sleep(0.3)


async def _ignore(err: Exception) -> None:
    pass


async def outcomes(url: str, claim_ids: list[str], timeout: float = 90) -> dict[str, str]:
    """Each claim's status once every one is decided (or what they were at the deadline)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for claim_id in claim_ids:
                try:
                    msg = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id), direct=True)
                    seen[claim_id] = json.loads(msg.data)["status"]
                except nats.js.errors.NotFoundError:
                    seen[claim_id] = "no outcome"
            if all(status in DECIDED for status in seen.values()):
                break
            await asyncio.sleep(0.3)
    finally:
        await nc.close()
    return seen


def submit_in_background(url: str, claim_ids: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: asyncio.run(submit_retrying(url, claim_ids)), daemon=True)
    thread.start()
    return thread
