"""A Java client with no NATS library (tests/contract/java/GpuledgerClient.java: the NATS client
protocol over one socket, JetStream by its wire subjects), written from README.md,
docs/contract.md and schemas/json alone, against a server with gpuledger's users: as the
`publisher` it submits with an idempotency key (a repeat is a duplicate), watches the outcome and
reads it by direct get, reads why a claim is pending and why one was refused, and is refused a
release by nats-server; as a system's own user it submits a leased claim, renews it and releases
it twice. Session 27: every step worked as documented."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tenants.conftest import tenants  # noqa: F401 (the fixture)

CLIENT = Path(__file__).parents[1] / "contract" / "java" / "GpuledgerClient.java"


def _run_java(*args: str) -> dict:
    done = subprocess.run(["java", str(CLIENT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


async def test_a_java_client_from_the_docs_alone(tenants):  # noqa: F811
    if shutil.which("java") is None:
        pytest.skip("no `java` (JDK 11 or later) on PATH: the Java client is not run")
    out = await asyncio.to_thread(_run_java, tenants.url("publisher"), tenants.url("system-billing"), "billing")
    assert out["ack"]["stream"] == "GPULEDGER_INTAKE" and "duplicate" not in out["ack"], out["ack"]
    assert out["repeat"] == out["ack"] | {"duplicate": True}, out["repeat"]
    assert out["watched"]["status"] in ("allocated", "bound") and out["watched"]["devices"] == 2, out["watched"]
    assert out["watched"]["claim_id"].startswith("java.") and out["watched"]["cuda"], out["watched"]
    assert out["direct"]["status"] == out["watched"]["status"] and out["direct"]["same_seq"], out["direct"]
    assert out["direct"]["subject"] == "gpu.outcome.claim." + out["watched"]["claim_id"].replace(".", "_")
    assert out["direct_unknown"] == "404"  # "not found means no outcome yet"
    assert out["pending"]["codes"][0] == "never-satisfiable" and out["pending"]["final"] is False, out["pending"]
    assert out["refused"] == {"status": "rejected", "code": "invalid", "field": "gpus"}, out["refused"]
    assert out["publisher_release"] == "ERR"  # nats-server: Permissions Violation
    assert out["system_held"] == {"status": "allocated", "system": "billing"}, out["system_held"]
    assert out["system_direct"] == "allocated"
    assert out["renew"]["ok"] and out["renew"]["lease"]["seconds"] == 120, out["renew"]
    assert out["release"] == {"ok": True, "status": "released"}, out["release"]
    assert out["release_again"] == {"ok": True, "already": "released"}, out["release_again"]
    assert out["system_final"] == {"status": "released", "code": "released"}, out["system_final"]
    assert out["renew_ended"]["code"] == "conflict" and out["renew_ended"]["field"] == "claim_id", out["renew_ended"]
