"""A store written before the accounts (or by `up --no-auth`) keeps the ledger's streams under
nats-server's global account; `up` with users moves them to the ledger's account first, so an
upgraded stack finds its ledger (shared.nats_auth.move_store_account)."""

from __future__ import annotations

import nats

from shared import nats_auth
from shared.natsserver import start_nats_server


async def _count(url: str, stream: str) -> int | None:
    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info(stream)).state.messages
    except nats.js.errors.NotFoundError:
        return None
    finally:
        await nc.close()


async def test_a_store_of_the_global_account_is_moved_to_the_ledger_s_and_back(tmp_path):
    store = tmp_path / "nats"
    server = start_nats_server(store)
    try:
        nc = await nats.connect(server.url)
        await nc.jetstream().add_stream(name="KEPT", subjects=["kept.>"])
        await nc.jetstream().publish("kept.one", b"1")
        await nc.close()
    finally:
        server.stop()

    roles = nats_auth.roles()
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    assert nats_auth.move_store_account(store, accounts=True)
    assert not nats_auth.move_store_account(store, accounts=True)  # once
    server = start_nats_server(store, config_file=conf)
    try:
        assert await _count(nats_auth.user_url("ops", passwords["ops"], "127.0.0.1", server.port), "KEPT") == 1
    finally:
        server.stop()

    assert nats_auth.move_store_account(store, accounts=False)  # `up --no-auth` afterwards
    server = start_nats_server(store)
    try:
        assert await _count(server.url, "KEPT") == 1
    finally:
        server.stop()
