"""The default quota (issue 16): recorded in the log, applied by the allocator's decision to every
namespace without a quota of its own, each on its own; replayed and snapshotted exactly."""

from __future__ import annotations

from schemas import events as ev
from schemas.commands import SetDefaultQuota

from ledger.evolve import fold
from ledger.snapshot import from_snapshot, to_snapshot
from services.quota.validation import spec_from_default
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step


def default(**fields) -> ev.QuotaDefaultSet:
    return ev.QuotaDefaultSet(spec=spec_from_default(SetDefaultQuota(**fields)), at=1.0)


def allocated(decisions) -> list[str]:
    return [d.claim_id for d in of_type(decisions, ev.ClaimAllocated)]


def test_each_namespace_without_a_quota_gets_the_default_on_its_own():
    state = fleet(node("n1", 8), default(requests_vram="80Gi"), quota("team-a", requests_vram="240Gi"))
    add(state, *(claim(f"{ns}{i}", namespace=ns, at=2.0 + i) for ns in ("web", "ml") for i in range(2)),
        *(claim(f"a{i}", namespace="team-a", at=5.0 + i) for i in range(3)))
    decisions = step(state)
    assert allocated(decisions) == ["web0", "ml0", "a0", "a1", "a2"]  # 80Gi each; team-a its own 240Gi
    waiting = {p.claim_id: p.reasons[0].message for p in of_type(decisions, ev.ClaimPending)}
    assert waiting["web1"] == ("quota exceeded in namespace web for vram: requested 80Gi, limit 80Gi, "
                               "in use 80Gi (the default quota)")


def test_without_a_default_a_namespace_without_quota_is_unlimited_and_deleting_it_lifts_the_limit():
    state = fleet(node("n1", 8), default(max_workers=1))
    add(state, claim("w0", namespace="web"), claim("w1", namespace="web", at=3.0))
    assert allocated(step(state)) == ["w0"]
    add(state, ev.QuotaDefaultDeleted(at=4.0))
    assert allocated(step(state, now=11.0)) == ["w1"]


def test_per_workload_limits_of_the_default_reject_what_can_never_fit():
    state = fleet(node("n1", 8), default(single_max_gpu_count=2))
    add(state, claim("big", namespace="web", gpus=4))
    [rejected] = of_type(step(state), ev.AllocationRejected)
    assert rejected.code == "quota-single-exceeded"


def test_the_default_is_part_of_replay_and_of_snapshots():
    events = [node("n1", 8), default(requests_vram="80Gi", max_workers=3)]
    state = fold(enumerate(events, start=1))
    assert state.default_quota.total.requests.vram_mib == 80 * 1024
    restored = from_snapshot(to_snapshot(state))
    assert restored.default_quota == state.default_quota
    add(restored, claim("w0", namespace="web"), claim("w1", namespace="web", at=3.0))
    assert allocated(step(restored)) == ["w0"]


# --- on a real nats-server: the quota service records it, the allocator applies it -------------------


async def test_the_default_quota_through_the_services(fresh_nats):
    import nats

    from schemas import subjects
    from shared.jetstream import JetStreamEventLog
    from tests.quota.test_service import cmd, eventually
    from tests.service.helpers import h100_node, register_nodes, request, running

    async with running(fresh_nats.url, "quota", "allocator", "claim"):
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("n1", 4))
        bad = await cmd(nc, "default.set", requests_vram="80")
        assert bad["error"]["field"] == "requests_vram" and "has no unit" in bad["error"]["message"]
        assert (await cmd(nc, "default.get"))["error"]["code"] == "not-found"
        set_reply = await cmd(nc, "default.set", max_workers=1)
        assert set_reply["ok"], set_reply
        for claim_id, wait in (("w0", 5.0), ("w1", 0.0)):
            submitted = await request(nc, subjects.command("claim.submit"), {
                "claim": {"claim_id": claim_id, "namespace": "web"}, "wait_seconds": wait})
            assert submitted["ok"], submitted
        assert submitted["data"]["status"] == "pending"

        async def waiting():
            got = await request(nc, subjects.query("claim.get"), {"claim_id": "w1"})
            return got if got["data"].get("reasons") else None

        reasons = (await eventually(waiting))["data"]["reasons"]
        assert reasons[0]["message"] == ("quota exceeded in namespace web for workers: requested 1, limit 1, "
                                         "in use 1 (the default quota)")
        got = await eventually(lambda: _default_applies(nc))
        assert got["data"]["applies_to"] == ["web"]
        web = (await cmd(nc, "get", namespace="web"))["data"]
        assert web["source"] == "default" and web["spec"]["total"]["max_workers"] == 1
        assert (await cmd(nc, "default.delete"))["ok"]
        unlimited = (await cmd(nc, "get", namespace="web"))["data"]  # it has use: shown, without limits
        assert unlimited["source"] == "none" and unlimited["conditions"][0]["reason"] == "NoQuota"
        assert (await cmd(nc, "get", namespace="nobody"))["error"]["code"] == "not-found"
        stored = [type(s.event).__name__ async for s in log.read()
                  if isinstance(s.event, (ev.QuotaDefaultSet, ev.QuotaDefaultDeleted))]
        assert stored == ["QuotaDefaultSet", "QuotaDefaultDeleted"]
        await nc.close()


async def _default_applies(nc):
    from tests.quota.test_service import cmd

    got = await cmd(nc, "default.get")
    return got if got.get("ok") and got["data"]["applies_to"] else None
