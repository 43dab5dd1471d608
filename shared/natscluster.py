"""A three-server NATS JetStream cluster on this machine (loopback ports, cluster routes), for
`gpuledger up --cluster 3`, the tests and `bench chaos`: the streams then run at R3, and a server
can be killed and restarted to see what the services do.

A cluster URL is the servers' URLs joined by commas (`nats://127.0.0.1:4001,nats://...:4002`),
the form GPULEDGER_NATS_URL takes for a cluster; `server_urls` splits it for the clients.
"""

from __future__ import annotations

import os
import signal
from urllib.parse import unquote, urlsplit, urlunsplit
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from shared.natsserver import PORT_TRIES, NatsServerError, PortTaken, find_binary, free_port, own_lines

CLUSTER_NAME = "gpuledger"


def server_urls(url: str) -> list[str]:
    """The servers of a URL that may list several, comma-separated (a cluster's URL)."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ValueError(f"NATS URL {url!r} names no server")
    return urls


NKEY_SEED_ENV = "GPULEDGER_NATS_NKEY_SEED_FILE"  # shared.nats_auth.NKEY_SEED_ENV
INBOX_PREFIX_ENV = "GPULEDGER_NATS_INBOX_PREFIX"  # a client's own reply/delivery subjects
# Services answer requests only on reply subjects under this prefix (shared.commands.answerable):
# an inbox prefix outside it would send requests whose answers never come.
ANSWERED_PREFIX = "_INBOX"


def connect_args(url: str) -> dict:
    """`nats.connect` keyword arguments for a URL of one or more servers: the servers without
    credentials, and the URL's credentials as options. A cluster announces its other servers to
    each client without credentials, and nats-py only sends the options' ones to those: with the
    credentials left in the URLs, a reconnect to an announced server is refused ('Authorization
    Violation') and the client is stuck."""
    servers: list[str] = []
    args: dict = {}
    for raw in server_urls(url):
        parts = urlsplit(raw)
        if parts.username is not None and parts.password is not None:
            args.update(user=unquote(parts.username), password=unquote(parts.password))
        elif parts.username is not None:
            args.update(token=unquote(parts.username))
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = f"{host}:{parts.port}" if parts.port else host
        servers.append(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))
    seed_file = os.environ.get(NKEY_SEED_ENV)
    if seed_file and not args:  # an nkey user (production): its seed from a file, e.g. a Secret
        args["nkeys_seed"] = seed_file
    inbox = os.environ.get(INBOX_PREFIX_ENV)
    if inbox:  # replies and consumer deliveries on subjects only this user may subscribe to
        args["inbox_prefix"] = checked_inbox_prefix(inbox)
    return {"servers": servers, **args}


def checked_inbox_prefix(prefix: str) -> str:
    """`prefix` when requests with replies under it will be answered; a ValueError naming the
    setting otherwise (they would only time out, the refusal logged on the serving side alone)."""
    if prefix.startswith(ANSWERED_PREFIX):
        return prefix
    raise ValueError(f"{INBOX_PREFIX_ENV}={prefix!r}: an inbox prefix must start with "
                     f"{ANSWERED_PREFIX!r} (services answer requests only on {ANSWERED_PREFIX}... "
                     "reply subjects), e.g. _INBOX_<user>")


def url_inbox_prefix(url: str) -> str:
    """The reply subjects of a client connecting with `url` (the CLI, `bench`, `simulate --live`):
    `_INBOX_<user>` of the URL's user (`_INBOX_ops` without one), never nats' shared `_INBOX.`,
    which the `publisher` user may read; the publisher itself keeps `_INBOX`, the only inbox it
    may read. INBOX_PREFIX_ENV overrides it (a ValueError when services would not answer there)."""
    if os.environ.get(INBOX_PREFIX_ENV):
        return checked_inbox_prefix(os.environ[INBOX_PREFIX_ENV])
    user = url_user(url)
    if user == "publisher":
        return "_INBOX"
    return f"_INBOX_{user or 'ops'}"


def url_user(url: str) -> str:
    """The user a URL connects as (its first server's `user:password@`), "" without one (an open
    server, a token, an nkey seed from NKEY_SEED_ENV) or for a malformed URL (the connection says so)."""
    first = url.split(",")[0].strip()
    try:
        parts = urlsplit(first if "://" in first else f"nats://{first}")
        return unquote(parts.username or "") if parts.password is not None else ""
    except ValueError:
        return ""


def broker_args(url: str) -> dict:
    """The same for faststream's NatsBroker, which takes credentials as `security`."""
    from faststream.security import SASLPlaintext

    args = connect_args(url)
    if "user" in args:
        args["security"] = SASLPlaintext(username=args.pop("user"), password=args.pop("password"))
    return args


@dataclass
class ClusterNode:
    """One nats-server of the cluster: its ports stay the same across a kill and a restart, so
    the others' routes and the clients' server lists find it again."""

    name: str
    port: int
    route_port: int
    http_port: int
    store_dir: Path
    argv: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    pass_fds: tuple[int, ...] = ()  # kept open by the server (`gpuledger up`'s lock on its folder)
    log_offset: int = 0  # where this run's lines begin in the log (appended to across restarts)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.store_dir / "nats-server.log"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        pass_fds=self.pass_fds)

    def kill(self) -> None:
        """kill -9: no shutdown, no goodbye to the routes; the others notice on their own."""
        if self.alive:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def said(self) -> str:
        """What this run of the server logged."""
        return own_lines(self.log_file, f"[{self.process.pid}] ", self.log_offset) if self.process else ""

    def healthy(self) -> bool:
        """The server's own health check: JetStream on, the meta group has a leader and this
        server's streams are current. Asked only once its own log says it listens: the monitoring
        port could answer for another process that bound it first (this server then exits)."""
        if "Server is ready" not in self.said():
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False


@dataclass
class NatsCluster:
    nodes: list[ClusterNode]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    @property
    def replicas(self) -> int:
        return len(self.nodes)

    def kill(self, index: int) -> ClusterNode:
        node = self.nodes[index]
        node.kill()
        return node

    def restart(self, index: int, ready_timeout: float = 30.0) -> None:
        node = self.nodes[index]
        node.start()
        _wait_healthy([node], ready_timeout)

    def stop(self, timeout: float = 10.0) -> None:
        for node in self.nodes:
            node.stop(timeout)


def _argv(node: ClusterNode, peers: list[ClusterNode], config_file: str | os.PathLike | None = None) -> list[str]:
    routes = ",".join(f"nats://127.0.0.1:{peer.route_port}" for peer in peers if peer is not node)
    config = ["-c", str(config_file)] if config_file else []  # users (shared.nats_auth); flags win
    return [find_binary(), *config, "-a", "127.0.0.1", "-p", str(node.port), "-m", str(node.http_port),
            "-js", "-sd", str(node.store_dir), "-n", node.name, "-l", str(node.log_file),
            "--cluster_name", CLUSTER_NAME, "--cluster", f"nats://127.0.0.1:{node.route_port}",
            "--routes", routes]


def start_nats_cluster(store_dir: str | os.PathLike, size: int = 3, ports: list[int] | None = None,
                       ready_timeout: float = 30.0, config_file: str | os.PathLike | None = None,
                       pass_fds: tuple[int, ...] = ()) -> NatsCluster:
    """Start `size` nats-servers routed to each other, wait until every one reports healthy
    (JetStream's meta group has elected a leader)."""
    if size < 1:
        raise NatsServerError(f"a cluster needs at least one server, got {size}")
    ports = list(ports or [])
    store = Path(store_dir)
    for attempt in range(1, PORT_TRIES + 1):  # ports found free here and bound by another first: others
        nodes = [ClusterNode(f"n{i}", ports[i] if i < len(ports) and ports[i] else free_port(),
                             free_port(), free_port(), store / f"n{i}", pass_fds=pass_fds) for i in range(size)]
        for node in nodes:
            node.argv = _argv(node, nodes, config_file)
        cluster = NatsCluster(nodes)
        for node in nodes:
            node.start()
        try:
            _wait_healthy(nodes, ready_timeout)
            return cluster
        except PortTaken:
            cluster.stop()
            if attempt == PORT_TRIES:
                raise
        except BaseException:
            cluster.stop()
            raise
    raise AssertionError("unreachable")


def _wait_healthy(nodes: list[ClusterNode], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting = list(nodes)
    while waiting and time.monotonic() < deadline:
        for node in list(waiting):
            if not node.alive:
                said = node.said()
                kind = PortTaken if "address already in use" in said else NatsServerError
                raise kind(f"nats-server {node.name} exited with {node.process.returncode}: "
                           f"{said[-600:]} (log: {node.log_file})")
            if node.healthy():
                waiting.remove(node)
        if waiting:
            time.sleep(0.1)
    if waiting:
        names = ", ".join(f"{n.name} (log: {n.log_file})" for n in waiting)
        raise NatsServerError(f"nats-servers not healthy within {timeout:g}s: {names}")
