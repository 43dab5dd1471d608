"""The quota service on a real nats-server: commands, status query, alerts and drift in the log."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage, Grant
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim, node
from tests.service.helpers import request, running


@pytest.fixture
async def quota_stack(fresh_nats):
    async with running(fresh_nats.url, "quota", stale_after_s=600.0) as contexts:
        nc = await nats.connect(fresh_nats.url)
        yield nc, JetStreamEventLog(nc), contexts[0]
        await nc.close()


async def cmd(nc, name: str, **body) -> dict:
    return await request(nc, subjects.command(f"quota.{name}"), body)


async def status(nc, namespace: str = "") -> dict:
    return await request(nc, subjects.query("quota.status"), {"namespace": namespace})


async def events_of(log, kind) -> list:
    return [s.event async for s in log.read() if isinstance(s.event, kind)]


async def eventually(check, timeout: float = 10.0):
    for _ in range(int(timeout / 0.05)):
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.05)
    return await check()


async def allocate(log, claim_id: str, namespace: str, uuid: str, vram_gib: int = 80, at: float = 1.0):
    await log.append(subjects.claim(claim_id), claim(claim_id, namespace=namespace, at=at))
    grant = Grant(node="n1", uuid=uuid, index=int(uuid[-1]), memory_mib=vram_gib * 1024)
    decision = ev.ClaimAllocated(claim_id=claim_id, namespace=namespace, node="n1", grants=[grant],
                                 tflops=989.0, vram_mib=vram_gib * 1024, limit_tflops=989.0,
                                 limit_vram_mib=vram_gib * 1024, at=at)
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[decision], at=at))


async def test_set_get_list_delete(quota_stack):
    nc, log, _ = quota_stack
    reply = await cmd(nc, "set", namespace="team-a", requests_vram="100Gi", limits_vram="200Gi",
                      requests_tflops="1000", max_workers=50, single_max_requests_vram="16Gi",
                      single_max_gpu_count=8)
    assert reply["ok"], reply
    spec = reply["data"]["status"]["spec"]
    assert spec["total"]["requests"]["vram_mib"] == 102400 and spec["single"]["max_gpu_count"] == 8
    got = await cmd(nc, "get", namespace="team-a")
    assert got["data"]["spec"] == spec
    assert [c["type"] for c in got["data"]["conditions"]] == ["Ready", "Exceeded", "AlertThresholdReached"]
    await cmd(nc, "set", namespace="team-b", requests_vram="1Ti", parent="org")
    listed = await cmd(nc, "list")
    assert [(q["namespace"], q["source"]) for q in listed["data"]] == [
        ("org", "cohort"), ("team-a", "own"), ("team-b", "own")]  # org: a cohort by being named parent
    assert [q["namespace"] for q in (await cmd(nc, "list", parent="org"))["data"]] == ["org", "team-b"]
    deleted = await cmd(nc, "delete", namespace="team-a")
    assert deleted["ok"] and deleted["data"]["deleted"] is True
    missing = await cmd(nc, "get", namespace="team-a")
    assert missing["error"] == {"code": "not-found", "field": "namespace",
                                "message": "no quota for namespace 'team-a': it has none of its own and "
                                           "no default quota is set, so it is unlimited"}
    stored = await events_of(log, (ev.QuotaSet, ev.QuotaDeleted))
    assert [type(e).__name__ for e in stored] == ["QuotaSet", "QuotaSet", "QuotaDeleted"]


@pytest.mark.parametrize("body, field, words", [
    ({"namespace": "team-a", "requests_vram": "300Gi", "limits_vram": "200Gi"}, "requests_vram",
     "300Gi is above limits_vram 200Gi"),
    ({"namespace": "team-a", "requests_vram": "16"}, "requests_vram", "has no unit"),
    ({"namespace": "team-a", "requests_tflops": "-4"}, "requests_tflops", "must not be negative"),
    ({"namespace": "team-a", "requests_vram": "64Gi", "single_max_requests_vram": "80Gi"},
     "single_max_requests_vram", "above requests_vram"),
    ({"namespace": "team-a", "max_workers": "many"}, "max_workers", "Expected `int | null`"),
    ({"requests_vram": "1Gi"}, "namespace", "missing required field `namespace`"),
])
async def test_bad_quotas_get_a_clear_error_naming_the_field(quota_stack, body, field, words):
    nc, log, _ = quota_stack
    reply = await request(nc, subjects.command("quota.set"), body)
    assert reply["ok"] is False and reply["error"]["code"] == "invalid"
    assert reply["error"].get("field", "") == field
    assert words in reply["error"]["message"]
    assert await events_of(log, ev.QuotaSet) == []


async def test_deleting_an_unknown_quota_is_not_found(quota_stack):
    nc, _, _ = quota_stack
    reply = await cmd(nc, "delete", namespace="nobody")
    assert reply["error"]["code"] == "not-found"


async def test_status_and_alerts_follow_the_allocations_in_the_log(quota_stack):
    nc, log, _ = quota_stack
    await log.append(subjects.node("n1"), node("n1", 4))
    await cmd(nc, "set", namespace="team-a", requests_vram="160Gi", alert_threshold_percent=90)
    await allocate(log, "c1", "team-a", "n1-gpu0")
    await allocate(log, "c2", "team-a", "n1-gpu1")

    async def raised():
        return await events_of(log, ev.QuotaAlertRaised)

    [alert] = await eventually(raised)
    assert (alert.namespace, alert.resource, alert.used_percent, alert.threshold_percent) == ("team-a", "vram", 100.0, 90.0)
    now = await status(nc, "team-a")
    quota = now["data"]["quotas"][0]
    assert quota["used"]["requests_vram_mib"] == 160 * 1024 and quota["alerts"] == ["vram"]
    assert {c["type"]: c["status"] for c in quota["conditions"]}["AlertThresholdReached"] is True

    await log.append(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1", at=2.0))

    async def cleared():
        return await events_of(log, ev.QuotaAlertCleared)

    [clear] = await eventually(cleared)
    assert clear.used_percent == 50.0
    assert len(await events_of(log, ev.QuotaAlertRaised)) == 1


async def test_a_restart_does_not_raise_alerts_already_in_the_log(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    log = JetStreamEventLog(nc)
    async with running(fresh_nats.url, "quota"):
        await log.append(subjects.node("n1"), node("n1", 4))
        await cmd(nc, "set", namespace="team-a", requests_vram="80Gi")
        await allocate(log, "c1", "team-a", "n1-gpu0")

        async def raised():
            return await events_of(log, ev.QuotaAlertRaised)

        assert len(await eventually(raised)) == 1
    async with running(fresh_nats.url, "quota") as contexts:
        service = contexts[0].quota
        await service.follower.wait_for_seq(await log.last_seq())
        assert await service.reconcile_once() == 0  # a pass after the restart finds nothing to do
        assert len(await events_of(log, ev.QuotaAlertRaised)) == 1
        assert ("team-a", "vram") in service.view.alerts
    await nc.close()


async def test_drift_is_reported_once_and_shown_by_status(quota_stack):
    nc, log, _ = quota_stack
    await log.append(subjects.node("n1"), node("n1", 4))
    await allocate(log, "c1", "team-a", "n1-gpu0", at=0.0)
    usage = [DeviceUsage(uuid="n1-gpu0"), DeviceUsage(uuid="n1-gpu3", pids=[4242], memory_used_mib=2048)]
    for at in (1.0, 1000.0, 1010.0):  # idle from the agent's first report since the allocation
        await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", devices=usage, at=at))

    async def detected():
        found = await events_of(log, ev.DriftDetected)
        return found if len(found) >= 2 else None

    found = await eventually(detected)
    assert sorted((d.kind, d.uuid, d.claim_id) for d in found) == [
        ("idle-allocation", "", "c1"), ("unallocated-process", "n1-gpu3", "")]
    drift = (await status(nc))["data"]["drift"]
    assert sorted(d["kind"] for d in drift) == ["idle-allocation", "unallocated-process"]
    await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", devices=[
        DeviceUsage(uuid="n1-gpu0", pids=[1]), DeviceUsage(uuid="n1-gpu3")], at=1020.0))

    async def cleared():
        found = await events_of(log, ev.DriftCleared)
        return found if len(found) >= 2 else None

    assert len(await eventually(cleared)) == 2
    assert (await status(nc))["data"]["drift"] == []
    assert len(await events_of(log, ev.DriftDetected)) == 2  # each mismatch once
