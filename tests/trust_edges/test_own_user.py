"""A service started with another service's credentials refuses to start where the deployment asks
for the check (GPULEDGER_NATS_REQUIRE_OWN_USER, on under `up`, docker-compose and deploy/k8s): it
asks nats-server who it connected as ($SYS.REQ.USER.INFO) and compares the account (each service is
alone in its own) and, for a password user, the name. Before session 35 a URL naming another user
gave one warning line and an nkey seed of another service none at all (its name is in no URL)."""

from __future__ import annotations

import json
import logging

import pytest

from shared import nats_auth
from shared.natscluster import NKEY_SEED_ENV
from shared.natsserver import start_nats_server
from tests.cli import invoke
from tests.service.helpers import running
from tests.trust_agents.conftest import agents_server  # noqa: F401  (fixture)


async def test_a_service_with_another_services_password_refuses_to_start(agents_server):  # noqa: F811
    with pytest.raises(SystemExit) as stopped:
        async with running(agents_server.url("allocator"), "claim", nats_require_own_user=True):
            pass
    said = str(stopped.value)
    assert "claim: connected to NATS as user 'allocator' in account 'SVC_ALLOCATOR'" in said, said
    assert "the allocator service's credentials" in said and "expected user 'claim'" in said
    assert "account 'SVC_CLAIM'" in said and "gpuledger nats creds claim" in said


async def test_ops_credentials_are_refused_too(agents_server):  # noqa: F811
    with pytest.raises(SystemExit) as stopped:
        async with running(agents_server.url(nats_auth.OPS), "quota", nats_require_own_user=True):
            pass
    assert "as user 'ops' in account 'LEDGER'" in str(stopped.value)


async def test_its_own_credentials_start_and_the_check_is_said(agents_server, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, logger="gpuledger")
    async with running(agents_server.url, "claim", "allocator", nats_require_own_user=True):
        pass
    said = [r.getMessage() for r in caplog.records]
    assert "claim: connected to NATS as its own user (account SVC_CLAIM)" in said
    assert "allocator: connected to NATS as its own user (account SVC_ALLOCATOR)" in said


@pytest.fixture
def nkey_server(tmp_path):
    data = tmp_path / "data"
    done = invoke("nats", "config", "--nkeys", "--users-only", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    conf = tmp_path / "users.conf"
    conf.write_text(done.stdout)
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    yield server, json.loads((data / nats_auth.NKEYS_FILE).read_text())
    server.stop()


async def test_another_services_nkey_seed_is_refused_though_no_url_names_it(nkey_server, tmp_path, monkeypatch):
    server, seeds = nkey_server
    for user in ("allocator", "claim"):
        (tmp_path / f"{user}.nk").write_text(seeds[user])
    monkeypatch.setenv(NKEY_SEED_ENV, str(tmp_path / "allocator.nk"))
    with pytest.raises(SystemExit) as stopped:
        async with running(server.url, "claim", nats_require_own_user=True):
            pass
    said = str(stopped.value)
    assert "claim: connected to NATS as nkey user U" in said and "in account 'SVC_ALLOCATOR'" in said, said
    assert "expected user 'claim' (or its nkey) in account 'SVC_CLAIM'" in said
    monkeypatch.setenv(NKEY_SEED_ENV, str(tmp_path / "claim.nk"))  # its own seed: it starts
    monkeypatch.setenv("GPULEDGER_NATS_INBOX_PREFIX", nats_auth.user_inbox("claim"))
    async with running(server.url, "claim", nats_require_own_user=True):
        pass


@pytest.mark.parametrize("user, account, refused", [
    ("claim", "SVC_CLAIM", False),
    ("U" + "A" * 55, "SVC_CLAIM", False),  # its nkey: the account says whose
    ("U" + "A" * 55, "SVC_QUOTA", True),
    ("claim", "SVC_QUOTA", True),  # a user named claim in another account: not its own
    ("", "$G", True),  # an open server, where the deployment asked for the check
    ("publisher", "PUBLIC", True),
])
def test_which_identities_are_refused(user, account, refused):
    assert (nats_auth.identity_refusal("claim", user, account) is not None) is refused
    assert nats_auth.identity_refusal("node-agent-x", user, account) is None  # not a service's name
