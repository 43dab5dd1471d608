"""The agents' account as shared.nats_auth builds it: each agent user's rights are what they were
(its own nodes' subjects), everything it may publish or be delivered is imported from LEDGER and
nothing more, no two imports of an account overlap, and a pull consumer's fetch keeps its
response open (several messages answer one request)."""

from __future__ import annotations

import re

from shared import nats_auth

NODES, FLEET = ["gpu-1", "gpu-2"], ["sim-a", "sim-b"]


def _roles():
    return nats_auth.roles(agent_nodes=NODES, demo_fleet=FLEET)


def test_every_node_agent_is_in_the_agents_account_and_nothing_else_is():
    for role in _roles():
        is_agent = role.user.startswith("node-")
        assert (role.account == nats_auth.AGENTS_ACCOUNT) == is_agent, role.user


def test_the_agents_import_exactly_what_their_users_may_publish_or_are_delivered():
    roles = _roles()
    services, streams = nats_auth.account_imports(roles, nats_auth.AGENTS_ACCOUNT)
    agents = [r for r in roles if r.account == nats_auth.AGENTS_ACCOUNT]
    for role in agents:
        for subject in role.publish:
            assert any(nats_auth.covers(s, subject) for s in services), (role.user, subject)
        for subject in role.subscribe:
            if subject not in role.exported:  # its inbox: a watch's deliveries
                assert any(nats_auth.covers(s, subject) for s in streams), (role.user, subject)
    for subject in services:  # no import wider than one user's own right
        assert any(subject in r.publish for r in agents), subject
    for subject in streams:
        assert any(subject in r.subscribe for r in agents), subject
    assert not any(s.startswith(("gpu.evt.decision", "gpu.outcome", "$KV.")) for s in services + streams)


def test_no_two_imports_of_an_account_overlap():
    roles = nats_auth.roles(agent_nodes=NODES, demo_fleet=FLEET)
    for account in nats_auth.OUTSIDE_ACCOUNTS:
        for listed in nats_auth.account_imports(roles, account):
            for a in listed:
                assert not any(b != a and (nats_auth.covers(a, b) or nats_auth.covers(b, a)) for b in listed), a


def test_the_config_lists_each_import_once_and_streams_the_fetches():
    block = nats_auth.users_block(_roles(), {r.user: "x" for r in _roles()})
    agents = block[block.index("  AGENTS {"):]
    agents = agents[:agents.index("\n  }\n")]  # its own block only (the services' accounts follow)
    imports = re.findall(r'\{service: \{account: "LEDGER", subject: "([^"]+)"\}\}', agents)
    assert len(imports) == len(set(imports)) and any(".MSG.NEXT." in s for s in imports)
    fetch_exports = [line for line in block.splitlines() if "$JS.API.CONSUMER.MSG.NEXT." in line and "service:" in line
                     and "accounts:" in line]
    assert fetch_exports and all("response_type: stream" in line for line in fetch_exports)
    # the fleet's commands: served in AGENTS, imported by LEDGER (ops and bench ask them)
    assert '{service: {account: "AGENTS", subject: "gpu.cmd.node.fault"}}' in block


def test_covers_is_subject_containment():
    assert nats_auth.covers("a.>", "a.b.c") and nats_auth.covers("a.*", "a.b") and nats_auth.covers("a.b", "a.b")
    assert nats_auth.covers("a.>", "a.*.>") and not nats_auth.covers("a.*", "a.>")
    assert not nats_auth.covers("a.*", "a.b.c") and not nats_auth.covers("a.b", "a.*")
