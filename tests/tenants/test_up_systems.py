"""`gpuledger up --system NAME:NS` as it runs by default (NATS users on): the system's URL is
printed, the system submits on its own intake subject, reads the outcome, renews and releases its
claim on its own request subjects; the claim service (its own user, GPULEDGER_SYSTEMS handed on
by `up`) records the system; nothing any process needed was refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from schemas import systems
from tests.contract.test_outcomes import outcome_when

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
BIN = Path(sys.executable).parent / "gpuledger"
URL_LINE = "GPULEDGER_SYSTEM_BILL_ING_URL"


def _up(data_dir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "GPULEDGER_SYSTEMS"}
    proc = subprocess.Popen([str(BIN), "up", "--demo", "--fleet", "1xH100x8", "--no-dashboard",
                             "--system", "bill-ing:team-a", "--data-dir", str(data_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: dict[str, str] = {}
    while URL_LINE not in lines:
        line = proc.stdout.readline().strip()
        if "=" not in line:
            proc.kill()
            raise AssertionError(f"up printed {line!r}; stderr: {proc.stderr.read()}")
        name, value = line.split("=", 1)
        lines[name] = value
    return proc, lines


async def _ask(nc, verb: str, body: dict) -> dict:
    msg = await nc.request(systems.command(verb, "bill-ing"), json.dumps(body).encode(), timeout=10)
    return json.loads(msg.data)


async def test_up_gives_a_system_its_user_and_the_claim_service_its_namespaces(tmp_path):
    proc, lines = _up(tmp_path)
    try:
        url = lines[URL_LINE]
        assert url.startswith("nats://system-bill-ing:")
        nc = await nats.connect(url, inbox_prefix="_INBOX_system-bill-ing")
        try:
            claim = {"claim_id": "up-sys-1", "namespace": "team-a", "gpus": 1, "lease_seconds": 600}
            await nc.jetstream().publish(systems.intake("bill-ing"), json.dumps(claim).encode(),
                                         headers={"Nats-Msg-Id": "up-sys-1"})
            await outcome_when(nc.jetstream(), "up-sys-1", lambda o: o.status in ("allocated", "bound"), 60,
                               system="bill-ing")
            renewed = await _ask(nc, "renew", {"claim_id": "up-sys-1"})
            assert renewed["ok"] and renewed["data"]["system"] == "bill-ing", renewed
            elsewhere = await _ask(nc, "submit", {"claim": {"claim_id": "up-sys-2", "namespace": "team-b"}})
            assert elsewhere["error"]["code"] == "forbidden" and elsewhere["error"]["field"] == "claim.namespace"
            released = await _ask(nc, "release", {"claim_id": "up-sys-1"})
            assert released["ok"] and released["data"]["status"] == "released", released
            shown = subprocess.run([str(BIN), "claim", "get", "up-sys-1"], capture_output=True, text=True,
                                   timeout=60, env=dict(os.environ, GPULEDGER_NATS_URL=lines["GPULEDGER_NATS_URL"]))
            assert "submitted by system bill-ing" in shown.stdout, (shown.stdout, shown.stderr)
        finally:
            await nc.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    log = (tmp_path / "nats" / "nats-server.log").read_text()
    assert [line for line in log.splitlines() if "violation" in line.lower()] == []
