"""nkey users (issue 16, production NATS): `gpuledger nats config --nkeys` emits the permission
table of shared.nats_auth with public keys instead of passwords; a real nats-server runs it, a
service connects with its seed (as the services do, from GPULEDGER_NATS_NKEY_SEED_FILE) and is
refused outside its permissions; no seed, or another user's public key, gets nothing."""

from __future__ import annotations

import asyncio
import json
import os

import nats
import nats.errors
import pytest

nkeys = pytest.importorskip("nkeys", reason="nkeys (pyproject dependency) not installed: run make install")

from shared import nats_auth
from shared.natscluster import connect_args
from shared.natsserver import start_nats_server
from tests.cli import invoke

def _cli(*args: str) -> str:
    done = invoke(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def nkey_server(tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "users.conf"
    conf.write_text(_cli("nats", "config", "--nkeys", "--users-only", "--data-dir", str(data)))
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    yield server, data, conf.read_text()
    server.stop()


class Violations:
    def __init__(self):
        self.errors: list[str] = []
        self.changed = asyncio.Event()

    async def on_error(self, err: Exception) -> None:
        self.errors.append(str(err).lower())
        self.changed.set()


def test_the_configuration_has_public_keys_and_no_secret(nkey_server):
    _, data, conf = nkey_server
    seeds = json.loads((data / nats_auth.NKEYS_FILE).read_text())
    assert (data / nats_auth.NKEYS_FILE).stat().st_mode & 0o077 == 0
    for user, seed in seeds.items():
        assert seed.startswith("SU") and seed not in conf
        assert f'nkey: "{nats_auth.public_nkey(seed)}"' in conf
    assert "password" not in conf and set(seeds) >= {"claim", "allocator", "ops", "publisher"}
    assert _cli("nats", "nkey", "claim", "--data-dir", str(data)).strip() == seeds["claim"]


async def test_a_service_connects_with_its_seed_and_is_refused_outside_its_permissions(
        nkey_server, tmp_path, monkeypatch):
    server, data, _ = nkey_server
    seed_file = tmp_path / "claim.nk"
    seed_file.write_text(_cli("nats", "nkey", "claim", "--data-dir", str(data)))
    monkeypatch.setenv(nats_auth.NKEY_SEED_ENV, str(seed_file))
    ops = await nats.connect(server.url, nkeys_seed_str=_cli("nats", "nkey", "ops", "--data-dir", str(data)).strip())
    seen = asyncio.Event()

    async def on_msg(msg):
        seen.set()

    await ops.subscribe("gpu.evt.claim.probe", cb=on_msg)
    await ops.flush()
    errors = Violations()
    claim = await nats.connect(**connect_args(server.url), error_cb=errors.on_error, allow_reconnect=False)
    try:
        await claim.publish("gpu.evt.claim.probe", b"mine")  # its own subject: goes through
        await claim.publish("gpu.evt.decision", b"forged")  # the allocator's: refused
        await claim.flush()
        await asyncio.wait_for(seen.wait(), 10)
        while not any("gpu.evt.decision" in e for e in errors.errors):
            errors.changed.clear()
            await asyncio.wait_for(errors.changed.wait(), 10)
        assert all("permissions violation" in e for e in errors.errors)
        assert not any("gpu.evt.claim.probe" in e for e in errors.errors)
    finally:
        await claim.close()
        await ops.close()


async def test_no_seed_or_an_unknown_seed_is_refused(nkey_server):
    server, _, _ = nkey_server
    with pytest.raises(Exception):
        await nats.connect(server.url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)
    stranger = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    with pytest.raises(Exception):
        await nats.connect(server.url, nkeys_seed_str=stranger, allow_reconnect=False,
                           max_reconnect_attempts=0, connect_timeout=5)
