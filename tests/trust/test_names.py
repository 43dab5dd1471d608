"""Names and ids anchored at both ends, bounded, and never two ids on one subject (issue 16)."""

from __future__ import annotations

import json

import msgspec
import nats
import pytest

from schemas import subjects
from schemas.commands import IgnoreDevice, ReleaseClaim
from services.claim.intake import decode_claim, wait_intake_drained
from services.pool_controller.validation import LABEL_KEY, NAMESPACE, SERVICE_ACCOUNT
from services.quota.quantities import QuantityError
from services.quota.validation import check_name
from tests.service.helpers import request, running
from tests.trust.test_poison import dead_letters

BASE = {"claim_id": "c", "namespace": "team-a"}


@pytest.mark.parametrize("field, value", [
    ("namespace", "team-a\n"), ("claim_id", "c\n"), ("pool", "pool-a\n"), ("pool", "P" * 70),
    ("endpoint", "my endpoint"), ("endpoint", "e" * 64), ("gang_id", "g" * 129), ("gang_id", "job-1\n"),
    ("service_account", "system:serviceaccount:ns:sa\n"), ("service_account", "a" * 513),
    ("service_account", "ns: sa")])
def test_claim_names_and_ids_are_anchored_and_bounded(field, value):
    with pytest.raises(msgspec.ValidationError, match=field):
        decode_claim(msgspec.json.encode(BASE | {field: value}))


@pytest.mark.parametrize("field, value", [("pool", "pool-a"), ("endpoint", "chat.v1"), ("gang_id", "Job:1.a"),
                                          ("service_account", "system:serviceaccount:ns:sa")])
def test_valid_names_still_pass(field, value):
    assert getattr(decode_claim(msgspec.json.encode(BASE | {field: value})), field) == value


def test_names_checked_in_python_are_anchored_at_both_ends():
    with pytest.raises(QuantityError):
        check_name("team-a\n", "namespace")
    assert check_name("team-a", "namespace") == "team-a"
    for pattern, good in ((NAMESPACE, "team-a"), (LABEL_KEY, "example.com/key"),
                          (SERVICE_ACCOUNT, "system:serviceaccount:ns:sa")):
        assert pattern.match(good) and not pattern.match(good + "\n"), pattern.pattern


def test_free_text_stored_from_commands_is_bounded():
    for kind, fields in ((ReleaseClaim, {"claim_id": "c"}), (IgnoreDevice, {"node": "n", "device": "0"})):
        with pytest.raises(msgspec.ValidationError, match="reason"):
            msgspec.json.decode(msgspec.json.encode(fields | {"reason": "r" * 5000}), type=kind)


async def test_ids_that_would_share_a_subject_are_refused(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        js = nc.jetstream()
        first = await request(nc, subjects.command("claim.submit"), {"claim": BASE | {"claim_id": "col.a"}})
        assert first["ok"], first
        twin = await request(nc, subjects.command("claim.submit"), {"claim": BASE | {"claim_id": "col_a"}})
        assert not twin["ok"] and twin["error"]["code"] == "conflict", twin
        assert "gpu.evt.claim.col_a" in twin["error"]["message"] and "col.a" in twin["error"]["message"]
        # through the intake, and two twins drained in one batch: the first one wins
        for claim_id in ("col_a", "x_1.y", "x.1_y"):
            await js.publish(subjects.INTAKE_CLAIMS, json.dumps(BASE | {"claim_id": claim_id}).encode())
        await wait_intake_drained(js)
        refused = {letter.claim_id: letter.code for letter in await dead_letters(js)}
        assert refused == {"col_a": "conflict", "x.1_y": "conflict"}, refused
        got = await request(nc, subjects.query("claim.get"), {"claim_id": "x_1.y"})
        assert got["ok"] and got["data"]["status"] == "pending"
        # a refused twin writes nothing on the subject it would share (nor on its outcome); the claim
        # col.a itself is on the submit subject (session 34 on), so that subject holds nothing
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.get_last_msg(subjects.STREAM, subjects.claim("col_a"))
        await nc.close()


def test_a_quota_whose_subject_another_namespaces_quota_has_is_refused():
    from schemas.commands import SetQuota
    from schemas.types import QuotaSpec
    from services.quota.validation import spec_from_command

    spec_from_command(SetQuota(namespace="team.a", requests_vram="10Gi"), {"team-a": QuotaSpec()})
    with pytest.raises(QuantityError, match="gpu.evt.quota.team_a"):
        spec_from_command(SetQuota(namespace="team.a", requests_vram="10Gi"), {"team_a": QuotaSpec()})
    spec_from_command(SetQuota(namespace="team_a", requests_vram="20Gi"), {"team_a": QuotaSpec()})  # itself
