"""`gpuledger up` with NATS users on (the default): which user each child connects as.

The users and their rights are shared.nats_auth's table; their passwords are made once and kept in
DATA_DIR/nats-users.json (0600), and the nats-server configuration in DATA_DIR/nats-auth.conf
(0600), so URLs printed by an earlier start keep working after a restart.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from schemas.systems import System
from shared import nats_auth

CONFIG_FILE = "nats-auth.conf"
# the names a node agent gives its node (services.node_agent.app.local_node_name): lower-case
# letters, digits and '-', at most 63; a user made for another name is one no agent connects as
NODE_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def node_names(names: list[str]) -> list[str]:
    """A typer callback for --node / --agent-node: each a name a node agent would use."""
    import typer

    for name in names:
        if not NODE_NAME.fullmatch(name):
            agent = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63]
            raise typer.BadParameter(
                f"{name!r} is not a node name: lower-case letters, digits and '-', at most 63"
                + (f" (an agent given GPULEDGER_NODE_NAME={name!r} calls its node {agent!r}: use that)"
                   if agent else ""))
    return names


@dataclass
class StackUsers:
    """Each user's password, and the config file that makes nats-server know them."""

    passwords: dict[str, str]
    config_file: Path

    def url(self, user: str, ports: list[int], host: str = "127.0.0.1") -> str:
        """The user's URL; a cluster's is each server's, comma-separated (as clients take it)."""
        return ",".join(nats_auth.user_url(user, self.passwords[user], host, port) for port in ports)


def fleet_nodes(fleet: str | None) -> list[str]:
    """The node names of a demo fleet spec (the simulated agents' user may write only these)."""
    if not fleet:
        return []
    from services.node_agent.fleet import parse_fleet  # the fleet's naming, not a copy of it
    return [spec.name for spec in parse_fleet(fleet)]


def prepare(data_dir: Path, fleet: str | None, agent_nodes: list[str] = (),
            systems: tuple[System, ...] = ()) -> StackUsers:
    """Passwords (kept) and the users block for nats-server, for the services, ops, publisher,
    each publishing system (`system-<name>`), the simulated fleet's agents when there is one, and
    a user per real agent's node (`gpuledger nats creds node-<name>` prints its URL)."""
    roles = nats_auth.roles(agent_nodes=list(agent_nodes), demo_fleet=fleet_nodes(fleet), systems=systems)
    passwords = nats_auth.load_secrets(data_dir, [r.user for r in roles])
    path = data_dir / CONFIG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(nats_auth.users_block(roles, passwords))
    os.chmod(path, 0o600)
    return StackUsers(passwords, path)


def child_user(child: str) -> str:
    """The NATS user a child of `up` connects as (its name; the simulated agents share one)."""
    return child if child in nats_auth.SERVICES else nats_auth.DEMO_AGENTS
