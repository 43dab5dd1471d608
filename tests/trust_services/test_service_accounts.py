"""The services' accounts as shared.nats_auth builds them: each service alone in an account of its
own, its rights what they were, everything it may publish or be delivered imported from LEDGER and
nothing wider; what it serves exported to LEDGER (where ops, and through LEDGER the dashboard and
the publishers, ask it), a publisher's outcomes straight from the claim service's account; no two
imports of an account overlap."""

from __future__ import annotations

from schemas.systems import System
from shared import nats_auth

SYSTEMS = (System("billing", ("team-a",)),)


def _roles():
    return nats_auth.roles(agent_nodes=["gpu-1"], demo_fleet=["sim-a"], systems=SYSTEMS)


def service_role(user: str) -> nats_auth.Role:
    return next(r for r in nats_auth.service_roles() if r.user == user)


def test_each_service_is_alone_in_its_own_account_and_ops_keeps_the_streams():
    roles = _roles()
    accounts = [r.account for r in roles if r.user in nats_auth.SERVICES]
    assert len(set(accounts)) == len(nats_auth.SERVICES) and nats_auth.LEDGER_ACCOUNT not in accounts
    assert [r.account for r in roles if r.account == nats_auth.LEDGER_ACCOUNT] == [nats_auth.LEDGER_ACCOUNT]
    assert next(r for r in roles if r.user == nats_auth.OPS).account == nats_auth.LEDGER_ACCOUNT


def test_a_service_imports_exactly_what_it_may_publish_or_is_delivered():
    roles = _roles()
    for user in nats_auth.SERVICES:
        role = service_role(user)
        services, streams = nats_auth.account_imports(roles, role.account)
        for subject in role.publish:
            if subject.startswith(nats_auth.SYSTEM_REQUESTS):  # the server answers it in every account
                assert subject not in services, (user, subject)
                continue
            assert any(nats_auth.covers(s, subject) for s in services), (user, subject)
        assert streams == [f"{nats_auth.user_inbox(user)}.>"], (user, streams)
        for subject in services:  # no import wider than its own right
            assert subject in role.publish, (user, subject)


def test_what_a_service_serves_comes_from_its_account_through_ledger():
    roles = _roles()
    ledger = nats_auth.served_imports(roles)
    for user in nats_auth.SERVICES:
        role = service_role(user)
        for subject in role.exported:  # ops asks every one, the others through LEDGER
            assert (role.account, subject) in ledger, subject
    assert ("AGENTS", "gpu.cmd.node.fault") in ledger
    dashboard = nats_auth.account_imports(roles, nats_auth.service_account("dashboard"))[0]
    assert "gpu.qry.>" in dashboard
    public = nats_auth.account_imports(roles, nats_auth.PUBLIC_ACCOUNT)
    assert "gpu.cmd.claim.submit" in public[0] and "gpu.cmd.claim.release.billing" in public[0]
    claim = nats_auth.service_account("claim")
    outcomes = nats_auth.published_imports(roles, nats_auth.PUBLIC_ACCOUNT)
    assert sorted(outcomes) == [(claim, "gpu.outcome.claim.>"), (claim, "gpu.outcome.system.billing.>")]
    assert not any(s.startswith("gpu.outcome.") for s in public[1])  # not from LEDGER


def test_no_two_imports_of_an_account_overlap():
    roles = _roles()
    ledger = [t for _, t in nats_auth.served_imports(roles)]
    for listed in [ledger] + [nats_auth.account_imports(roles, a)[0] for a in nats_auth.OUTSIDE_ACCOUNTS] + \
            [nats_auth.account_imports(roles, a)[1] + [t for _, t in nats_auth.published_imports(roles, a)]
             for a in nats_auth.OUTSIDE_ACCOUNTS]:
        for a in listed:
            assert not any(b != a and nats_auth.overlaps(a, b) for b in listed), a


def test_overlaps():
    assert nats_auth.overlaps("gpu.qry.>", "gpu.qry.claim.>") and nats_auth.overlaps("a.*.c", "a.b.*")
    assert not nats_auth.overlaps("a.b", "a.b.c") and not nats_auth.overlaps("a.>", "a")
    assert not nats_auth.overlaps("a.b.>", "a.c.>") and nats_auth.overlaps("a.*", "a.b")
