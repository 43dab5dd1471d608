"""deploy/nats and `gpuledger nats config|creds` come from the one table in shared.nats_auth, and
nats-server accepts what they produce."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from shared import nats_auth
from shared.natsserver import find_binary
from tests.cli import invoke

ROOT = Path(__file__).resolve().parents[2]


def _gpuledger(*args: str) -> subprocess.CompletedProcess:
    return invoke(*args)  # in-process: a subprocess only adds a second of start-up


def _valid(conf: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([find_binary(), "-t", "-c", str(conf)], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), cwd=conf.parent, timeout=30)


def test_deploy_users_file_is_the_table():
    on_disk = (ROOT / "deploy" / "nats" / "gpuledger-users.conf").read_text()
    assert on_disk == nats_auth.users_block(nats_auth.roles()), (
        "deploy/nats/gpuledger-users.conf is stale: regenerate it with "
        "`gpuledger nats config --users-only --env-passwords > deploy/nats/gpuledger-users.conf`")
    assert '"publisher"' in on_disk and "$GPULEDGER_NATS_ALLOCATOR_PASSWORD" in on_disk


def test_deploy_config_is_accepted_by_nats_server():
    env = {nats_auth.env_password(role.user): "secret" for role in nats_auth.roles()}
    done = _valid(ROOT / "deploy" / "nats" / "nats.conf", {**env, "SERVER_NAME": "nats-0"})
    assert done.returncode == 0, done.stderr + done.stdout


def test_cli_config_with_node_users_is_accepted(tmp_path):
    done = _gpuledger("nats", "config", "--data-dir", str(tmp_path), "--node", "gpu-a", "--node", "gpu-b",
                      "--store-dir", str(tmp_path / "js"))
    assert done.returncode == 0, done.stderr
    assert '"node-gpu-a"' in done.stdout and '"gpu.evt.node.gpu-b.>"' in done.stdout
    conf = tmp_path / "server.conf"
    conf.write_text(done.stdout)
    checked = _valid(conf)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert (tmp_path / nats_auth.SECRETS_FILE).stat().st_mode & 0o777 == 0o600


def test_creds_prints_a_known_user_s_url_and_names_an_unknown_one(tmp_path):
    nats_auth.load_secrets(tmp_path, ["ops", "publisher"])
    done = _gpuledger("nats", "creds", "publisher", "--data-dir", str(tmp_path), "--port", "4333")
    assert done.returncode == 0, done.stderr
    secret = nats_auth.load_secrets(tmp_path, ["publisher"])["publisher"]
    assert done.stdout.strip() == f"nats://publisher:{secret}@127.0.0.1:4333"
    unknown = _gpuledger("nats", "creds", "nobody", "--data-dir", str(tmp_path))
    assert unknown.returncode == 1 and "'nobody'" in unknown.stderr


def test_secrets_are_made_once(tmp_path):
    first = nats_auth.load_secrets(tmp_path, ["ops", "claim"])
    again = nats_auth.load_secrets(tmp_path, ["ops", "claim", "publisher"])
    assert again["ops"] == first["ops"] and again["claim"] == first["claim"] and again["publisher"]
    assert len(set(again.values())) == 3


def test_every_request_subject_of_the_contract_is_served_by_one_service():
    """A request subject (schemas/asyncapi.py) no service user may subscribe to would go unanswered
    under `up`: the table must grow with the contract."""
    from schemas.asyncapi import REQUESTS, SIMULATION_REQUESTS

    services = nats_auth.service_roles()
    for subject, *_ in REQUESTS:
        serving = [r.user for r in services if any(nats_auth.matches(p, subject) for p in r.subscribe
                                                   if p != "_INBOX.>")]
        assert len(serving) == 1, f"{subject} served by {serving}"
    agents = nats_auth.node_role("node-agents", ["n1"], simulated=True)
    for subject, _ in SIMULATION_REQUESTS:
        assert any(nats_auth.matches(p, subject) for p in agents.subscribe), subject


def test_wildcards_match_as_nats_does():
    assert nats_auth.matches("gpu.qry.>", "gpu.qry.claim.get")
    assert not nats_auth.matches("gpu.qry.>", "gpu.qry")
    assert nats_auth.matches("gpu.*.claim", "gpu.qry.claim") and not nats_auth.matches("gpu.*", "gpu.qry.claim")


def test_compose_runs_nats_with_the_users_of_its_fleet():
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["node-agents"]["command"]
    fleet = command[command.index("--fleet") + 1]
    from gpuledger_cli.up_auth import fleet_nodes

    wanted = nats_auth.users_block(nats_auth.roles(demo_fleet=fleet_nodes(fleet)))
    assert (ROOT / "deploy" / "nats" / "compose-users.conf").read_text() == wanted, (
        "deploy/nats/compose-users.conf is stale: `gpuledger nats config --users-only --env-passwords "
        f"--demo-fleet '{fleet}' > deploy/nats/compose-users.conf`")
    nats = compose["services"]["nats"]
    assert "/etc/nats/gpuledger-users.conf" in nats["command"]
    for role in nats_auth.roles(demo_fleet=fleet_nodes(fleet)):
        assert nats_auth.env_password(role.user) in nats["environment"], role.user
    env = {nats_auth.env_password(r.user): "x" for r in nats_auth.roles(demo_fleet=fleet_nodes(fleet))}
    conf = ROOT / "deploy" / "nats" / "compose-users.conf"
    assert _valid(conf, env).returncode == 0


def test_the_cli_says_a_refused_login_without_echoing_the_password(auth_server):
    done = invoke("claim", "list", "--nats-url", f"nats://ops:not-the-secret@127.0.0.1:{auth_server.port}")
    assert done.returncode == 1 and "refused" in done.stderr
    assert "not-the-secret" not in done.stderr and "ops:***@" in done.stderr
