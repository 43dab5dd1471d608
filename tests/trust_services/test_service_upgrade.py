"""Upgrading to the services' own accounts: the streams stay in LEDGER, and what a service made
there while it was in LEDGER (the claim service's durable intake consumer) it binds again from its
own account, its user and password unchanged: the claims waiting in the intake are fetched, and
its appends land in the same log (what `up` on an existing data dir does: it writes the new
configuration at every start)."""

from __future__ import annotations

import dataclasses

import nats

from schemas import subjects
from shared import nats_auth
from shared.jetstream import ensure_streams
from shared.natsserver import start_nats_server

DURABLE = "claim-intake-upgrade"


def _old_roles() -> list[nats_auth.Role]:
    """The configuration before session 33: the services in LEDGER with the streams."""
    return [dataclasses.replace(r, account=nats_auth.LEDGER_ACCOUNT, exported=())
            if r.user in nats_auth.SERVICES else r for r in nats_auth.roles()]


async def test_a_service_binds_what_it_made_in_ledger_from_its_own_account(tmp_path):
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in nats_auth.roles()])
    store = tmp_path / "nats"
    old, new = tmp_path / "old.conf", tmp_path / "new.conf"
    old.write_text(nats_auth.users_block(_old_roles(), passwords))
    new.write_text(nats_auth.users_block(nats_auth.roles(), passwords))
    def users_of(conf, account):
        return conf.read_text().split(f"\n  {account} {{")[1].split("\n  }")[0]

    claim_account = nats_auth.service_account("claim")  # the claim user: in LEDGER before, its own after
    assert '{user: "claim"' in users_of(old, "LEDGER") and '{user: "claim"' in users_of(new, claim_account)

    def url(server, user):
        return nats_auth.user_url(user, passwords[user], "127.0.0.1", server.port)

    server = start_nats_server(store, config_file=old)
    try:
        ops = await nats.connect(url(server, "ops"))
        await ensure_streams(ops.jetstream())
        claim = await nats.connect(url(server, "claim"), inbox_prefix=nats_auth.user_inbox("claim"))
        await claim.jetstream().pull_subscribe(subjects.INTAKE_CLAIMS, durable=DURABLE, stream=subjects.INTAKE_STREAM)
        for i in range(3):
            await ops.jetstream().publish(subjects.INTAKE_CLAIMS, f'{{"claim_id": "w-{i}"}}'.encode())
        before = (await ops.jetstream().stream_info(subjects.STREAM)).state.last_seq
        await claim.close()
        await ops.close()
    finally:
        server.stop()

    server = start_nats_server(store, config_file=new)
    try:
        claim = await nats.connect(url(server, "claim"), inbox_prefix=nats_auth.user_inbox("claim"))
        pull = await claim.jetstream().pull_subscribe(subjects.INTAKE_CLAIMS, durable=DURABLE,
                                                      stream=subjects.INTAKE_STREAM)
        fetched = await pull.fetch(3, timeout=30)
        assert sorted(m.data for m in fetched) == [f'{{"claim_id": "w-{i}"}}'.encode() for i in range(3)]
        for msg in fetched:
            await msg.ack_sync()
        ack = await claim.jetstream().publish(f"{subjects.DEAD_LETTER}.upgraded", b"{}", stream=subjects.STREAM)
        assert ack.seq == before + 1  # the same log, continued
        await claim.close()
    finally:
        server.stop()
