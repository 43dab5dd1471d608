"""`gpuledger quota set|get|list|delete|status` against the quota service on a real nats-server."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import node
from tests.service.helpers import running


@pytest.fixture
async def url(fresh_nats):
    async with running(fresh_nats.url, "quota"):
        yield fresh_nats.url


async def gl(url: str, *args: str):
    """Run the CLI in a thread (it runs its own event loop), like a user at a shell."""
    result = await asyncio.to_thread(CliRunner().invoke, app, ["quota", *args, "--nats-url", url])
    return result.exit_code, result.output


async def test_set_get_list_delete_from_the_command_line(url):
    code, out = await gl(url, "set", "team-a", "--requests-vram", "100Gi", "--limits-vram", "200Gi",
                         "--requests-tflops", "1000", "--max-workers", "50",
                         "--single-max-requests-vram", "16Gi", "--single-max-gpu-count", "8")
    assert code == 0, out
    assert "quota team-a set" in out and "vram          0Gi of 100Gi  100% available" in out
    code, out = await gl(url, "get", "team-a", "--json")
    assert code == 0 and json.loads(out)["spec"]["total"]["limits"]["vram_mib"] == 200 * 1024
    code, out = await gl(url, "list")
    assert code == 0 and "team-a" in out
    code, out = await gl(url, "delete", "team-a")
    assert code == 0 and "quota team-a deleted" in out
    code, out = await gl(url, "get", "team-a")
    assert code == 1 and ("not-found: no quota for namespace 'team-a': it has none of its own and no default "
                          "quota is set, so it is unlimited (field namespace)") in out


async def test_an_admin_lets_a_namespace_preempt_across_namespaces_from_the_command_line(url):
    code, out = await gl(url, "set", "team-a", "--preempt-other-namespaces")
    assert code == 0, out
    code, out = await gl(url, "get", "team-a", "--json")
    assert code == 0 and json.loads(out)["spec"]["preempt_other_namespaces"] is True
    code, out = await gl(url, "set", "team-a")  # set replaces the quota: back to its own namespace only
    code, out = await gl(url, "get", "team-a", "--json")
    assert code == 0 and "preempt_other_namespaces" not in json.loads(out)["spec"]


async def test_bad_input_prints_the_field_and_the_problem(url):
    code, out = await gl(url, "set", "team-a", "--requests-vram", "300Gi", "--limits-vram", "200Gi")
    assert code == 1
    assert "invalid: 300Gi is above limits_vram 200Gi (field requests_vram)" in out
    code, out = await gl(url, "set", "team-a", "--requests-vram", "lots")
    assert code == 1 and "(field requests_vram)" in out and "not a quantity" in out


async def test_status_shows_conditions_and_drift(url):
    await gl(url, "set", "team-a", "--requests-vram", "64Gi")
    nc = await nats.connect(url)
    log = JetStreamEventLog(nc)
    await log.append(subjects.node("n1"), node("n1", 2))
    await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", at=5.0, devices=[
        DeviceUsage(uuid="n1-gpu1", pids=[31337], memory_used_mib=4096)]))
    out = ""
    for _ in range(100):
        code, out = await gl(url, "status")
        if "unallocated-process" in out:
            break
        await asyncio.sleep(0.05)
    await nc.close()
    assert code == 0
    assert "Ready=True (Enforced)" in out and "Exceeded=False (WithinQuota)" in out
    assert "unallocated-process on n1: pid 31337 uses 4096 MiB on n1-gpu1" in out
    code, out = await gl(url, "status", "team-a", "--json")
    assert json.loads(out)["quotas"][0]["namespace"] == "team-a"

