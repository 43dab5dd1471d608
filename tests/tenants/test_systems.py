"""Declaring publishing systems (schemas/systems.py) and their NATS users (shared.nats_auth)."""

from __future__ import annotations

import pytest

from schemas import systems
from schemas.systems import SystemsError, parse_systems
from shared import nats_auth
from shared.nats_auth import matches


def test_a_declaration_names_each_system_and_its_namespaces():
    billing, render = parse_systems("billing:team-a,team-b; render:*")
    assert billing == systems.System("billing", ("team-a", "team-b"))
    assert billing.allows("team-a") and not billing.allows("team-c")
    assert render.allows("anything") and render.user == "system-render"
    assert parse_systems(systems.spec_of((billing, render))) == (billing, render)
    assert parse_systems(["billing:team-a", "render:x"])[1].namespaces == ("x",)
    assert parse_systems("") == ()


@pytest.mark.parametrize("text, words", [
    ("billing", "NAME:NAMESPACE"),
    ("Billing:team-a", "system name 'Billing'"),
    ("bill.ing:team-a", "system name 'bill.ing'"),
    ("billing:", "names no namespace"),
    ("billing:Team A", "namespace 'Team' is not a namespace name"),
    ("billing:team-a;billing:team-b", "declared twice"),
])
def test_a_bad_declaration_is_refused_naming_the_part(text, words):
    with pytest.raises(SystemsError, match=words):
        parse_systems(text)


def test_the_settings_refuse_a_bad_declaration_naming_the_variable(monkeypatch):
    from shared.settings import Settings

    monkeypatch.setenv("GPULEDGER_SYSTEMS", "billing:team-a;render")
    with pytest.raises(SystemExit, match="GPULEDGER_SYSTEMS: system 'render'"):
        Settings()
    monkeypatch.setenv("GPULEDGER_SYSTEMS", "billing:team-a")
    assert Settings().systems == (systems.System("billing", ("team-a",)),)


def test_a_system_arrives_on_its_own_subjects_and_the_plain_ones_carry_none():
    assert systems.intake("billing") == "gpu.intake.claim.billing"
    assert systems.command("release", "billing") == "gpu.cmd.claim.release.billing"
    assert systems.of_subject("gpu.intake.claim.billing", "gpu.intake.claim") == "billing"
    assert systems.of_subject("gpu.intake.claim", "gpu.intake.claim") == ""
    assert systems.of_subject("gpu.cmd.claim.renew.x", "gpu.cmd.claim.renew") == "x"


def _can_publish(role, subject: str) -> bool:
    return any(matches(p, subject) for p in role.publish)


def test_a_system_user_may_publish_only_its_own_subjects():
    billing, render = parse_systems("billing:team-a;render:team-b")
    role = nats_auth.system_role(billing)
    for verb in systems.VERBS:
        assert _can_publish(role, f"gpu.cmd.claim.{verb}.billing")
        assert not _can_publish(role, f"gpu.cmd.claim.{verb}.render")
        assert not _can_publish(role, f"gpu.cmd.claim.{verb}")  # the plain subjects: ops' and publisher's
    assert _can_publish(role, "gpu.intake.claim.billing")
    assert not _can_publish(role, "gpu.intake.claim.render") and not _can_publish(role, "gpu.intake.claim")
    assert not any(_can_publish(role, s) for s in ("gpu.evt.claim.x", "gpu.qry.claim.get", "gpu.cmd.quota.set"))
    assert role.subscribe == ("gpu.outcome.system.billing.>", "_INBOX_system-billing.>") and not role.allow_responses
    assert _can_publish(role, "$JS.API.DIRECT.GET.GPULEDGER_OUTCOMES.gpu.outcome.system.billing.bill-1")
    for read in ("$JS.API.DIRECT.GET.GPULEDGER_OUTCOMES.gpu.outcome.system.render.r-1",
                 "$JS.API.DIRECT.GET.GPULEDGER_OUTCOMES.gpu.outcome.claim.x",
                 "$JS.API.DIRECT.GET.GPULEDGER_OUTCOMES",  # the subject in the body: unchecked
                 "$JS.API.STREAM.MSG.GET.GPULEDGER_OUTCOMES", "$JS.API.STREAM.INFO.GPULEDGER_OUTCOMES"):
        assert not _can_publish(role, read), read
    users = [r.user for r in nats_auth.roles(systems=(billing, render))]
    assert "system-billing" in users and "system-render" in users and "publisher" in users
    # the shared publisher may not speak for a system either
    assert not _can_publish(nats_auth.publisher_role(), "gpu.cmd.claim.release.billing")
    assert not _can_publish(nats_auth.publisher_role(), "gpu.intake.claim.billing")
