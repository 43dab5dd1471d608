"""`gpuledger up`: the whole system on one machine, for a demo or development.

A real nats-server (unless --nats-url), the streams, every service as its own process, simulated
node agents with --demo, and the dashboard (which also serves the merged /metrics). Prints
`GPULEDGER_NATS_URL=...`, `GPULEDGER_METRICS=...` and `GPULEDGER_DASHBOARD=...` on stdout when
ready (and keeps them in DATA_DIR/env for the CLI); SIGINT or SIGTERM stops everything it started.
Data and ports (DATA_DIR/ports.json) stay in the data folder for the next start.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

import schemas
from gpuledger_cli import up_auth, up_lock, up_web
from gpuledger_cli.up_nice import lower_priority, nice_of
from gpuledger_cli.ports import PortBook
from gpuledger_cli.services_cmd import SERVICES
from gpuledger_cli.stack_env import write_env
from gpuledger_cli.up_supervise import Supervisor, Unit, describe
from shared import nats_auth
from shared.natscluster import connect_args, start_nats_cluster
from shared.natsserver import NatsServerError, start_nats_server
from shared.jetstream import ensure_streams
from shared.priority import NICE_WHEN_READY_ENV
from shared.retry import until_done
from shared.service import READY_SUBJECT, round_trip
from shared.settings import Settings
from schemas.systems import System, SystemsError, parse_systems, spec_of

DEFAULT_FLEET = "4xH100x8:islands=2,1xA100x4:mig"
DEMO_MODELS = Path(schemas.__file__).parent / "data" / "demo_models.yaml"  # slots offered by --demo


def _say(message: str) -> None:
    sys.stderr.write(f"gpuledger: {message}\n")
    sys.stderr.flush()


class Child:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path,
                 service: bool = False):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_dir / f"{name}.log"
        self.nice = nice_of(name, env)  # off the claim path: a lower CPU priority (up_nice.py)
        if service and self.nice:  # a service starts at full priority and lowers it when ready
            self.env, self.nice = env | {NICE_WHEN_READY_ENV: str(self.nice)}, 0
        self.process: subprocess.Popen | None = None
        self.folder: FolderLock | None = None  # `up`'s lock on the data folder: every child keeps it

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=lower_priority(self.nice),
                                        pass_fds=self.folder.fds if self.folder else ())
        log.close()
        if self.folder:
            self.folder.started(self.name, self.process.pid)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class FolderLock:
    """`up`'s lock on its data folder (up_lock.py), handed to every process it starts, and the
    list of those processes kept in the lock file as they start and restart."""

    def __init__(self, fd: int):
        self.fd, self.pids = fd, {"up": os.getpid()}

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.fd,)

    def started(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        up_lock.note(self.fd, self.pids)


def _available_services() -> list[str]:
    return [name for name, module in SERVICES.items() if importlib.util.find_spec(module) is not None]


def _children(services: list[str], env: dict[str, str], log_dir: Path, fleet: str | None,
              book: PortBook, dashboard: bool = True, urls: dict[str, str] | None = None) -> list[Child]:
    """Every service, the simulated agents (--demo) and the dashboard; each serves /metrics on a
    port of its own, which the dashboard merges into one scrape endpoint. With `urls` (NATS users
    on) each child connects with the URL of its own user."""
    exe = sys.executable

    def env_of(name: str) -> dict[str, str]:
        own = {"GPULEDGER_NATS_URL": urls[up_auth.child_user(name)]} if urls else {}
        if urls and name in nats_auth.SERVICES:  # a service started with another's credentials refuses
            own[nats_auth.OWN_USER_ENV] = "1"
        return env | up_web.metrics_port_env(book, name) | own

    children = [Child(s, [exe, "-m", "gpuledger_cli.main", "service", s], env_of(s), log_dir, service=True)
                for s in services]
    if fleet:
        children.append(Child("node-agents", [exe, "-m", "services.node_agent", "--fleet", fleet],
                              env_of("node-agents"), log_dir))
    if dashboard:
        argv, web_env = up_web.dashboard_command(book, [c.name for c in children])
        own = {"GPULEDGER_NATS_URL": urls[up_web.DASHBOARD]} if urls else {}
        children.append(Child(up_web.DASHBOARD, argv, env | web_env | own, log_dir))
    return children


class StoppedWhileStarting(Exception):
    """SIGINT or SIGTERM came before the stack was ready."""


async def _start_and_wait(children: list[Child], url: str, names: list[str], want_nodes: int,
                          timeout: float, replicas: int = 1, stopped=lambda: False,
                          supervisor: Supervisor | None = None) -> None:
    """Start the children, then wait until every service announced itself and, for a demo, the
    claim service sees the simulated nodes; or until `stopped()` (Ctrl-C while starting stops at
    once, not after the whole ready timeout). `supervisor` tends the children meanwhile: one that
    dies while starting is started again, as after the start (CI once waited the whole timeout on
    a service that had died before it announced itself), and one that keeps dying ends the wait."""
    import msgspec
    import nats

    from gpuledger_cli.client import inbox_prefix, redacted

    async def quiet(_err) -> None:  # nats-py's own callback prints a traceback for every attempt
        pass

    try:  # nats-py retries an unreachable server for about two minutes: bounded by the ready timeout
        nc = await asyncio.wait_for(nats.connect(**(connect_args(url) | {"inbox_prefix": inbox_prefix(url)}),
                                                 error_cb=quiet), timeout)  # not the publisher's _INBOX
    except (Exception, asyncio.TimeoutError) as err:
        why = f"nothing answered within {timeout:g}s" if isinstance(err, asyncio.TimeoutError) else err
        raise RuntimeError(f"cannot reach NATS at {redacted(url)} ({why})") from None
    ready: set[str] = set()

    async def on_ready(msg) -> None:
        ready.add(msg.subject.rsplit(".", 1)[-1])

    await nc.subscribe(f"{READY_SUBJECT}.*", cb=on_ready)
    await round_trip(nc)  # the subscription on the server before any service can announce itself
    # the streams first, as ops: a node agent may not create them, and would race the services
    # (a cluster still forming refuses R3 streams until its servers joined: waited out)
    # and the intake's limits set, also on a stream an older version made without them
    settings = Settings()
    await asyncio.wait_for(until_done(lambda: ensure_streams(nc.jetstream(), replicas, settings.intake_max_msgs,
                                                             settings.intake_max_bytes, update_limits=True),
                                      "create the streams"), timeout)
    for child in children:
        child.start()
    deadline = asyncio.get_running_loop().time() + timeout
    nodes = 0
    try:
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
            if stopped():
                raise StoppedWhileStarting("stopped (SIGINT or SIGTERM) before every service was ready")
            if supervisor is not None and not supervisor.step():
                raise RuntimeError("not ready: a process kept dying while the stack started")
            if not set(names) <= ready:
                continue
            try:
                reply = await nc.request("gpu.qry.cluster.summary", b"{}", timeout=1)
                nodes = (msgspec.json.decode(reply.data).get("data") or {}).get("nodes_ready", 0)
            except Exception:
                continue
            if nodes >= want_nodes:
                return
        missing = sorted(set(names) - ready)
        raise TimeoutError(f"not ready after {timeout:g}s: services not up: {missing or 'none'}; "
                           f"nodes ready {nodes} of {want_nodes}"
                           + "".join(_last_words(c) for c in children if c.name in missing))
    finally:
        await nc.close()


def _last_words(child: Child) -> str:
    """What a service that never announced itself last logged, and whether it still runs: the
    timeout's message then says why, where only its log had (a CI run keeps no log)."""
    try:
        lines = [line for line in child.log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    code = child.process.poll() if child.process else None
    state = "running" if child.process and code is None else describe(code) if code is not None else "not started"
    return f"; {child.name} ({state}) last logged: {lines[-1].strip()[:300] if lines else 'nothing'}"


def _fleet_spec(value: str) -> str:
    """--fleet checked before anything starts (a bad spec was a traceback from deep inside)."""
    from services.node_agent.fleet import FleetSpecError

    try:
        up_auth.fleet_nodes(value)
    except FleetSpecError as err:
        raise typer.BadParameter(str(err)) from None
    return value


def register(app: typer.Typer) -> None:
    @app.command("up")
    def up(demo: bool = typer.Option(False, "--demo", help="also run simulated node agents"),
           data_dir: Path = typer.Option(Path(".gpuledger"), "--data-dir", envvar="GPULEDGER_DATA_DIR",
                                         help="where NATS data, the read-model database and logs live"),
           nats_url: Optional[str] = typer.Option(None, "--nats-url", help="use this NATS server instead "
                                                  "of starting one"),
           fleet: str = typer.Option(DEFAULT_FLEET, "--fleet", callback=_fleet_spec,
                                     help="simulated fleet for --demo"),
           port: int = typer.Option(0, "--port", min=0, max=65535, help="client port of the embedded nats-server (default: "
                                    "the one the last start used, kept in DATA_DIR/ports.json, else a "
                                    "free one); remembered for the next start"),
           ready_timeout: float = typer.Option(90.0, "--ready-timeout", min=0, help="seconds to wait for every "
                                               "service (and demo node) to be ready"),
           dashboard: bool = typer.Option(True, "--dashboard/--no-dashboard", help="run the dashboard, "
                                          "which also serves the one /metrics of the stack (off: "
                                          "benchmarks that count every process's CPU)"),
           cluster: int = typer.Option(0, "--cluster", min=0, max=7, help="run this many embedded "
                                       "nats-servers as one JetStream cluster on loopback ports, the "
                                       "streams at that many replicas (3: survives one server's "
                                       "loss; see docs/reliability.md); 0: one server"),
           auth: bool = typer.Option(True, "--auth/--no-auth", help="the embedded nats-server "
                                     "refuses anonymous clients and gives each service, node agent, "
                                     "the CLI (ops) and claim publishers a user with only its own "
                                     "rights (docs/security.md); --no-auth: anyone on the port may "
                                     "write the ledger, for debugging only"),
           agent_node: list[str] = typer.Option([], "--agent-node", callback=up_auth.node_names,
                                                help="a real node agent will "
                                                "join as this node: give it a NATS user of its own "
                                                "(repeat per node; `gpuledger nats creds node-NAME` "
                                                "prints its URL)"),
           system: list[str] = typer.Option([], "--system", help="a publishing system NAME:NS[,NS...] "
                                            "(`*`: every namespace): a NATS user `system-NAME` that "
                                            "submits on gpu.intake.claim.NAME and may release and "
                                            "renew its own claims, in those namespaces only (repeat "
                                            "per system; default: GPULEDGER_SYSTEMS); its URL is "
                                            "printed as GPULEDGER_SYSTEM_<NAME>_URL")) -> None:
        """Run NATS (embedded by default), all five services and, with --demo, simulated nodes."""
        try:
            # every GPULEDGER_* variable is checked here, once, before anything starts: a bad one
            # otherwise stopped each child in turn, and `up` with them after its restarts
            systems = Settings(systems=parse_systems(system)).systems if system else Settings().systems
            if dashboard:  # its login's settings too (a short token, a bind beyond loopback without one)
                from services.dashboard.login import Login
                Login.from_env(os.environ.get("GPULEDGER_DASHBOARD_HOST", "127.0.0.1"), os.environ)
        except SystemsError as err:
            raise typer.BadParameter(str(err), param_hint="--system")
        try:
            _run_up(demo, data_dir, nats_url, fleet, port or None, ready_timeout, dashboard, cluster, auth,
                    agent_node, systems)
        except OSError as err:
            inside = bool(err.filename) and str(err.filename).startswith(str(data_dir.resolve()))
            if err.errno not in UNWRITABLE and not inside:
                raise
            # a full disk or a read-only one, or a file in the data folder it cannot write (session
            # 30: `up` on a full tmpfs ended in a traceback from its lock file's first write)
            where = f": {err.filename}" if err.filename else ""
            _say(f"--data-dir {data_dir}: cannot write there ({err.strerror}{where}); give it room, or "
                 "choose another folder with --data-dir")
            raise typer.Exit(1)


UNWRITABLE = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def _expected_nodes(fleet: str) -> int:
    total = 0
    for part in fleet.split(","):
        head = part.split(":", 1)[0]
        count = head.split("x", 1)[0]
        total += int(count) if count.isdigit() else 1
    return total


def _start_server(data_dir: Path, book: PortBook, port: int | None, users: up_auth.StackUsers | None,
                  folder: FolderLock | None = None):
    if nats_auth.move_store_account(data_dir / "nats", accounts=users is not None):
        _say(f"moved the streams in {data_dir / 'nats'} to the account of this run's users")
    try:
        server = start_nats_server(data_dir / "nats", port=book.take("nats", port),
                                   config_file=users.config_file if users else None,
                                   pass_fds=folder.fds if folder else ())
    except NatsServerError as err:
        _say(f"cannot start nats-server: {err}")
        raise typer.Exit(1)
    if folder:
        folder.started("nats-server", server.process.pid)
    who = "users and permissions from " + str(users.config_file) if users else "NO authorization (--no-auth)"
    _say(f"nats-server with JetStream at {server.url}, data in {data_dir / 'nats'}, {who}")
    return server


def _user_urls(users: up_auth.StackUsers | None, ports: list[int]) -> dict[str, str]:
    return {user: users.url(user, ports) for user in users.passwords} if users else {}


def _printed(nats_url: str, urls: dict[str, str], book: PortBook, dashboard: bool,
             systems: tuple[System, ...] = ()) -> list[tuple[str, str]]:
    lines = [("GPULEDGER_NATS_URL", nats_url)]
    if urls:
        lines.append(("GPULEDGER_PUBLISHER_URL", urls[nats_auth.PUBLISHER]))
        lines += [(system_url_variable(s.name), urls[s.user]) for s in systems]
    return lines + (up_web.printed_lines(book) if dashboard else [])


def system_url_variable(name: str) -> str:
    """Where `up` prints a publishing system's URL: GPULEDGER_SYSTEM_<NAME>_URL."""
    return "GPULEDGER_SYSTEM_" + name.replace("-", "_").upper() + "_URL"


def _run_up(demo: bool, data_dir: Path, nats_url: str | None, fleet: str, port: int | None,
            ready_timeout: float, dashboard: bool = True, cluster: int = 0, auth: bool = True,
            agent_nodes: list[str] = (), systems: tuple[System, ...] = ()) -> None:
    from gpuledger_cli import safe_output

    safe_output.EXIT_WHEN_READER_GONE = False  # its children are stopped on the way out, whatever comes
    given, data_dir = data_dir, data_dir.resolve()
    log_dir = data_dir / "logs"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file, under a file, a folder it may not write: one line, no traceback
        _say(f"--data-dir {given}: cannot make {log_dir} there ({err.strerror or err})")
        raise typer.Exit(1)
    try:
        folder = FolderLock(up_lock.hold(data_dir))
    except up_lock.DataDirBusy as err:
        _say(str(err))
        raise typer.Exit(1)
    server = holder = None
    try:  # a failure before the supervised run (a full disk) must not leave nats-server running
        book = PortBook(data_dir)
        urls: dict[str, str] = {}
        replicas = {}
        users = (up_auth.prepare(data_dir, fleet if demo else None, agent_nodes, systems)
                 if auth and nats_url is None else None)
        if nats_url is None and cluster:
            server, nats_url = _start_cluster(data_dir, cluster, book.take("nats", port), users, folder)
            replicas = {"GPULEDGER_STREAM_REPLICAS": str(min(cluster, 3))}
            urls = _user_urls(users, [node.port for node in server.nodes])
            holder = ServerHolder(server, lambda: server)
        elif nats_url is None:
            server = _start_server(data_dir, book, port, users, folder)
            holder = ServerHolder(server, lambda: _start_server(data_dir, book, server.port, users, folder))
            nats_url = server.url
            urls = _user_urls(users, [server.port])
        nats_url = urls.get(nats_auth.OPS, nats_url)
        env = dict(os.environ, GPULEDGER_NATS_URL=nats_url, GPULEDGER_DATA_DIR=str(data_dir),
                   PYTHONUNBUFFERED="1", **replicas)
        if systems:  # the claim service checks each system's namespaces and claims
            env["GPULEDGER_SYSTEMS"] = spec_of(systems)
        if demo and not os.environ.get("GPULEDGER_MODELS"):  # slots to try: `gpuledger slot acquire llama3-8b`
            env["GPULEDGER_MODELS"] = str(DEMO_MODELS)
        services = _available_services()
        children = _children(services, env, log_dir, fleet if demo else None, book, dashboard, urls)
        for child in children:
            child.folder = folder
        book.save()
        for change in book.changed:
            _say(change)
        stop = {"now": False}

        def on_signal(signum, frame) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    except BaseException:
        running = holder or server
        if running is not None:
            running.stop()
        raise
    try:
        _say(f"starting {', '.join(c.name for c in children)}; logs in {log_dir}")
        want = _expected_nodes(fleet) if demo else 0
        try:
            stream_replicas = int(env.get("GPULEDGER_STREAM_REPLICAS") or Settings().stream_replicas)
            supervisor = Supervisor(_units(children, holder), _say)
            asyncio.run(_start_and_wait(children, nats_url, services, want, ready_timeout, stream_replicas,
                                        stopped=lambda: stop["now"], supervisor=supervisor))
            if dashboard:
                home = up_web.printed_lines(book)[1][1]
                asyncio.run(up_web.wait_http(f"{home}healthz", ready_timeout))
        except Exception as err:
            _say(f"{err}; see the logs in {log_dir}")
            raise typer.Exit(1)
        lines = _printed(nats_url, urls, book, dashboard, systems)
        sys.stdout.writelines(f"{name}={value}\n" for name, value in lines)
        sys.stdout.flush()
        _say(f"these lines are also in {write_env(data_dir, lines)}: the CLI reads the URL from there")
        if not supervisor.run(stop):
            stop["failed"] = True
    finally:
        _say("stopping")
        for child in children:
            child.stop()
        deadline = time.monotonic() + 15
        for child in children:
            child.wait(deadline)
        if holder is not None:
            holder.stop()
        _say("stopped")
    if stop.get("failed"):
        raise typer.Exit(1)


def _start_cluster(data_dir: Path, size: int, first_port: int | None, users: up_auth.StackUsers | None,
                   folder: FolderLock | None = None):
    """`--cluster N`: N nats-servers routed to each other (shared/natscluster.py); the first keeps
    the port remembered for `nats`, the others get free ones."""
    try:
        cluster = start_nats_cluster(data_dir / "nats-cluster", size, ports=[first_port or 0],
                                     config_file=users.config_file if users else None,
                                     pass_fds=folder.fds if folder else ())
    except NatsServerError as err:
        _say(f"cannot start the nats-server cluster: {err}")
        raise typer.Exit(1)
    _say(f"{size} nats-servers as one JetStream cluster at {cluster.url}, data in "
         f"{data_dir / 'nats-cluster'}")
    return cluster, cluster.url


class ServerHolder:
    """The embedded nats-server, started again on the same port, store and users when it dies."""

    def __init__(self, server, restart: Callable[[], object]):
        self.server, self._restart = server, restart

    def units(self) -> list[Unit]:
        nodes = getattr(self.server, "nodes", None)
        if nodes:  # a cluster: each server on its own
            return [Unit(f"nats-server {node.name}", lambda node=node: node.process.poll(), node.start,
                         node.log_file) for node in nodes]
        return [Unit("nats-server", lambda: self.server.process.poll(), self.restart, self.server.log_file)]

    def restart(self) -> None:
        self.server = self._restart()

    def stop(self) -> None:
        self.server.stop()


def _units(children: list[Child], holder: ServerHolder | None) -> list[Unit]:
    """What `up` keeps running, from its start to its stop: nats-server and every child, each
    restarted when it dies (or, when one keeps dying, everything stops and `up` exits 1)."""
    units = holder.units() if holder else []
    return units + [Unit(c.name, lambda c=c: c.process.poll() if c.process else None, c.start, c.log_path)
                    for c in children]
