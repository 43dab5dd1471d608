"""`gpuledger nats config` and `gpuledger nats creds`: the NATS users of shared.nats_auth, as a
nats-server configuration or as one user's URL (docs/security.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from schemas.systems import System, SystemsError, parse_systems
from gpuledger_cli.up_auth import node_names
from shared import nats_auth
from shared.settings import Settings

nats_app = typer.Typer(help="NATS users and permissions: a server configuration, a user's URL.",
                       no_args_is_help=True)

DataDir = typer.Option(Path(".gpuledger"), "--data-dir", envvar="GPULEDGER_DATA_DIR",
                       help="where `gpuledger up` keeps its data "
                       "(the users' passwords are in DATA_DIR/nats-users.json, mode 0600)")


def _die(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(1)


@nats_app.command("config")
def config(data_dir: Path = DataDir,
           node: list[str] = typer.Option([], "--node", callback=node_names,
                                          help="add a node agent user `node-NAME` that "
                                          "may write only that node's subjects (repeat per node)"),
           env_passwords: bool = typer.Option(False, "--env-passwords", help="passwords as environment "
                                              "variables nats-server reads ($GPULEDGER_NATS_<USER>_"
                                              "PASSWORD), not secrets from DATA_DIR: for deploy/nats"),
           users_only: bool = typer.Option(False, "--users-only", help="only the accounts block (users, "
                                           "imports, exports; deploy/nats/gpuledger-users.conf is this with "
                                           "--env-passwords)"),
           demo_fleet: str = typer.Option("", "--demo-fleet", help="add the `node-agents` user of a "
                                          "simulated fleet run in one process (a fleet spec, as "
                                          "`gpuledger up --fleet`); deploy/nats/compose-users.conf "
                                          "has the default fleet's"),
           use_nkeys: bool = typer.Option(False, "--nkeys", help="nkey users (public keys only in the "
                                          "configuration; each user's seed in DATA_DIR/nats-nkeys.json, "
                                          "printed by `gpuledger nats nkey USER`) instead of passwords"),
           system: list[str] = typer.Option([], "--system", help="add a publishing system's user "
                                            "`system-NAME` (NAME:NS[,NS...], repeat per system; "
                                            "default: GPULEDGER_SYSTEMS); the claim service must be "
                                            "given the same systems (GPULEDGER_SYSTEMS)"),
           port: int = typer.Option(4222, "--port", min=1, max=65535, help="client port of the whole configuration"),
           store_dir: Path = typer.Option(Path("jetstream"), "--store-dir",
                                          help="JetStream store of the whole configuration")) -> None:
    """Print a nats-server configuration with every gpuledger user and its permissions."""
    roles = nats_auth.roles(agent_nodes=node, demo_fleet=_fleet_nodes(demo_fleet), systems=_systems(system))
    if use_nkeys and env_passwords:
        _die("--nkeys and --env-passwords exclude each other: nkey users have no password")
    passwords = public_keys = None
    if use_nkeys:
        seeds = nats_auth.load_nkeys(data_dir, [r.user for r in roles])
        public_keys = {user: nats_auth.public_nkey(seed) for user, seed in seeds.items()}
    elif not env_passwords:
        passwords = nats_auth.load_secrets(data_dir, [r.user for r in roles])
    if users_only:
        typer.echo(nats_auth.users_block(roles, passwords, public_keys), nl=False)
    else:
        typer.echo(nats_auth.server_config(roles, passwords, store_dir, port, public_keys=public_keys), nl=False)


@nats_app.command("nkey")
def nkey(user: str = typer.Argument(..., help="ops, publisher, system-NAME, a service (claim, "
                                     "allocator, ...), node-agents or node-NAME"),
         data_dir: Path = DataDir,
         public: bool = typer.Option(False, "--public", help="print the public key instead of the seed")) -> None:
    """Print one user's nkey seed (secret: give it to that client only, as a file named by
    GPULEDGER_NATS_NKEY_SEED_FILE), made by `gpuledger nats config --nkeys`."""
    path = data_dir / nats_auth.NKEYS_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        _die(f"no nkeys in {path} ({err}): run `gpuledger nats config --nkeys --data-dir {data_dir}` first")
    if user not in known:
        _die(f"user {user!r} unknown in {path}; known: {', '.join(sorted(known))}")
    typer.echo(nats_auth.public_nkey(known[user]) if public else known[user])


@nats_app.command("creds")
def creds(user: str = typer.Argument(..., help="ops, publisher, system-NAME (a publishing "
                                      "system), a service (claim, allocator, ...), node-agents (the "
                                      "demo fleet) or node-NAME"),
          data_dir: Path = DataDir,
          host: str = typer.Option("127.0.0.1", "--host", help="host in the printed URL"),
          port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="port in the printed URL (default: "
                                             "the one `gpuledger up` uses, from DATA_DIR/ports.json)")) -> None:
    """Print one user's URL, nats://USER:SECRET@HOST:PORT, from the secrets `gpuledger up` made."""
    path = data_dir / nats_auth.SECRETS_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        _die(f"no NATS users in {path} ({err}): run `gpuledger up --data-dir {data_dir}` first")
    if user not in known:
        _die(f"user {user!r} unknown in {path}; known: {', '.join(sorted(known))} (a node agent's "
             f"user comes with `gpuledger up --agent-node NAME`, a system's with `--system NAME:NS`)")
    typer.echo(nats_auth.user_url(user, known[user], host, port or _up_port(data_dir)))


def _systems(declared: list[str]) -> tuple[System, ...]:
    try:
        return parse_systems(declared) if declared else Settings().systems
    except SystemsError as err:
        _die(f"--system: {err}")


def _fleet_nodes(spec: str) -> list[str]:
    if not spec:
        return []
    from gpuledger_cli.up_auth import fleet_nodes
    from services.node_agent.fleet import FleetSpecError

    try:
        return fleet_nodes(spec)
    except FleetSpecError as err:
        _die(f"--demo-fleet: {err}")


def _up_port(data_dir: Path) -> int:
    try:
        return int(json.loads((data_dir / "ports.json").read_text())["nats"])
    except (OSError, ValueError, KeyError):
        return 4222


def register(app: typer.Typer) -> None:
    app.add_typer(nats_app, name="nats")
