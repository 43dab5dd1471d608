"""Run one service process: connect (faststream broker + its nats-py client), ensure the
streams, let the service register handlers and background loops, then serve until stopped."""

from __future__ import annotations

import asyncio
import json
import os
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from faststream.nats import NatsBroker
from nats.aio.client import Client

from shared.priority import lower_when_ready
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.metrics import Metrics
from shared.retry import quiet_error, until_done
from shared import nats_auth
from shared.nats_auth import foreign_user_warning, user_inbox
from shared.natscluster import INBOX_PREFIX_ENV, broker_args
from shared.settings import Settings

log = logging.getLogger("gpuledger")
READY_SUBJECT = "gpu.sys.ready"


@dataclass
class ServiceContext:
    name: str
    settings: Settings
    broker: NatsBroker
    nc: Client | None = None
    log: JetStreamEventLog | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    on_reconnect: list[Callable[[], None]] = field(default_factory=list)  # after a NATS outage
    metrics: Metrics = field(default_factory=Metrics)  # served when settings.metrics_port is set

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str = "") -> asyncio.Task:
        """A background loop that lives as long as the service; a crash in it stops the service."""
        task = asyncio.create_task(coro, name=name or self.name)
        self.tasks.append(task)
        return task


Builder = Callable[[ServiceContext], Awaitable[None]]


async def start_service(name: str, settings: Settings, build: Builder) -> ServiceContext:
    hooks: list[Callable[[], None]] = []

    closed = asyncio.Event()

    async def reconnected() -> None:
        log.warning("%s: reconnected to NATS", name)
        for hook in hooks:
            hook()

    async def on_closed() -> None:
        closed.set()

    broker = NatsBroker(**broker_args(settings.nats_url), name=f"gpuledger-{name}", max_reconnect_attempts=-1,
                        reconnect_time_wait=0.5, logger=None, error_cb=quiet_error,
                        reconnected_cb=reconnected, closed_cb=on_closed)
    ctx = ServiceContext(name, settings, broker, on_reconnect=hooks)
    foreign = foreign_user_warning(name, settings.nats_url)
    if foreign:  # a claim service as ops gives publishers no live outcomes: never silently
        log.warning("%s", foreign)
    await broker.connect()
    ctx.nc = broker.connection
    if settings.nats_require_own_user:
        await check_own_user(name, ctx.nc)
    # a start during an outage or a cluster's election waits it out instead of exiting
    await until_done(lambda: ensure_streams(ctx.nc.jetstream(), settings.stream_replicas, settings.intake_max_msgs,
                                            settings.intake_max_bytes),
                     f"{name}: checking the streams")
    ctx.log = JetStreamEventLog(ctx.nc)
    await build(ctx)
    ctx.spawn(_fail_when_closed(name, closed, ctx.nc), "nats-closed")
    await broker.start()
    # a round trip: the server has every subscription of this connection before it answers, so a
    # request sent once the service is up finds its handler (CI saw "no responders" once without)
    await until_done(lambda: round_trip(ctx.nc), f"{name}: registering its subscriptions")
    return ctx


async def who_am_i(nc: Client, timeout: float = 5.0) -> tuple[str, str]:
    """(user, account) of this connection, as nats-server itself says (`$SYS.REQ.USER.INFO`,
    answered by the server in every account; each service's user may ask it since session 35).
    Asked on the connection's own inbox first; with another's credentials that inbox may be one
    the user cannot read, so then once more on every inbox prefix a gpuledger user reads."""
    try:
        return _user_info((await nc.request(nats_auth.USER_INFO, b"", timeout=timeout)).data)
    except asyncio.TimeoutError:
        pass
    answered: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_answer(msg) -> None:
        if not answered.done():
            answered.set_result(msg.data)

    token = nc.new_inbox().rsplit(".", 1)[-1]
    subscriptions = []
    try:
        for prefix in dict.fromkeys([*(nats_auth.user_inbox(u) for u in nats_auth.SERVICES), "_INBOX"]):
            reply = f"{prefix}.{token}"
            subscriptions.append(await nc.subscribe(reply, cb=on_answer))
            await nc.publish(nats_auth.USER_INFO, b"", reply=reply)
        return _user_info(await asyncio.wait_for(answered, timeout))
    finally:
        for subscription in subscriptions:
            try:
                await subscription.unsubscribe()
            except Exception:  # a subscription the server refused: nothing to undo
                pass


def _user_info(data: bytes) -> tuple[str, str]:
    answer = json.loads(data)
    info = answer.get("data") or {}
    if not info and answer.get("error"):
        raise RuntimeError(f"nats-server answered {answer['error']}")
    return str(info.get("user", "")), str(info.get("account", ""))


async def check_own_user(name: str, nc: Client) -> None:
    """Refuse to start (SystemExit, naming what was found and what was expected) when this service
    connected with another's credentials: a URL naming another user, or another service's nkey
    seed, which no URL shows (before session 35 only the first was noticed, with a warning)."""
    if name not in nats_auth.SERVICES:  # a node agent's, a fleet's: not one of the services' users
        return
    try:
        user, account = await who_am_i(nc)
    except Exception as err:  # most likely no right to ask (an older NATS configuration)
        await nc.close()
        raise SystemExit(
            f"{name}: could not ask nats-server who this connection is ({nats_auth.USER_INFO}: "
            f"{type(err).__name__}: {err}); {nats_auth.OWN_USER_ENV}=1 needs it: regenerate the NATS "
            "users (`gpuledger nats config`, deploy/nats: every service may ask since session 35), check "
            f"that {name} runs with its own credentials, or unset {nats_auth.OWN_USER_ENV}") from None
    refusal = nats_auth.identity_refusal(name, user, account)
    if refusal:
        log.error("%s", refusal)
        await nc.close()
        raise SystemExit(refusal)
    log.info("%s: connected to NATS as its own user (account %s)", name, account)


async def round_trip(nc: Client, timeout: float = 5.0) -> None:
    """Return once nats-server has processed everything this connection sent before. nats-py's
    `flush` writes its PING straight to the socket while commands queued before it (the SUBs of
    `broker.start`) may still wait for the connection's flusher task, so the PONG could come back
    before the server had them: a request sent at once found no responders (about one service
    start in fifty under load, session 31). The queue goes to the socket first, then the PING."""
    flush_pending = getattr(nc, "_flush_pending", None)  # nats-py's own, private: absent elsewhere
    if flush_pending is not None and getattr(nc, "_pending_data_size", 0):
        await flush_pending(force_flush=True)
    await nc.flush(timeout=timeout)


async def _fail_when_closed(name: str, closed: asyncio.Event, nc: Client) -> None:
    """nats-py reconnects for ever after an outage, but closes the connection for good when the
    server answers a protocol error (a subject past its control line, say). A service left without
    NATS looks alive and answers nothing, so it fails instead: its supervisor (`gpuledger up`,
    Kubernetes) starts it again. Cancelled before `stop_service` closes the connection itself."""
    await closed.wait()
    raise ConnectionError(f"{name}: its NATS connection was closed for good ({nc.last_error!r}): "
                          "exiting, to be started again")


async def _cancel_all(ctx: ServiceContext) -> None:
    """Cancel the loops, again if one swallowed it (on Python 3.11 `asyncio.wait_for` can turn a
    cancel that races its timeout into a normal return), and never wait forever."""
    for _ in range(5):
        pending = [t for t in ctx.tasks if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=2.0)
    stuck = [t.get_name() for t in ctx.tasks if not t.done()]
    log.warning("%s: loops still running after cancel: %s", ctx.name, stuck)


async def stop_service(ctx: ServiceContext) -> None:
    await _cancel_all(ctx)
    if ctx.nc is not None and ctx.nc.is_closed:  # closed for good: nothing to flush or drain
        for hook in ctx.on_stop:
            try:
                await hook()
            except Exception as err:
                log.warning("%s: stopping without NATS: %s: %s", ctx.name, type(err).__name__, err)
        return
    for hook in ctx.on_stop:
        await hook()
    try:  # a subscription left open would make the drain wait its whole timeout: bound it
        await asyncio.wait_for(ctx.broker.stop(), timeout=5.0)
    except Exception as err:  # the timeout, or NATS away ("connection reconnecting": no drain)
        log.warning("%s: broker did not drain (%s); closing", ctx.name,
                    "not within 5s" if isinstance(err, asyncio.TimeoutError) else f"{type(err).__name__}: {err}")
        if ctx.nc is not None and not ctx.nc.is_closed:
            try:
                await asyncio.wait_for(ctx.nc.close(), timeout=5.0)
            except Exception as err:
                log.warning("%s: closing NATS: %s: %s", ctx.name, type(err).__name__, err)


STOP_GRACE_S = 10.0


async def leaving_nothing_behind(main: Awaitable[Any], grace_s: float = STOP_GRACE_S) -> Any:
    """A service process's whole run: `main` (its `serve`), then whatever it left running
    cancelled and waited for at most `grace_s`. nats-py swallows some cancels while it reconnects,
    and `asyncio.run` waits for every task: a service stopped (SIGTERM) during a NATS outage never
    exited (a `kill -9` of `up` followed by stopping what it left ran into it). The process then
    exits anyway, naming the tasks that ignored their cancel: what it wrote is in JetStream."""
    try:
        return await main
    finally:
        me = asyncio.current_task()
        left = [task for task in asyncio.all_tasks() if task is not me and not task.done()]
        for task in left:
            task.cancel()
        stuck = (await asyncio.wait(left, timeout=grace_s))[1] if left else set()
        if stuck:
            names = sorted(f"{t.get_name()} ({getattr(t.get_coro(), '__qualname__', '?')})" for t in stuck)
            log.error("stopping: %d task(s) ignored their cancel for %gs: %s; exiting without them",
                      len(stuck), grace_s, ", ".join(names))
            logging.shutdown()
            os._exit(1)


async def serve(name: str, settings: Settings, build: Builder) -> None:
    """Serve until SIGINT/SIGTERM or until a background loop fails."""
    # replies and deliveries on this service's own inbox prefix, the only one its NATS user may
    # subscribe to (unless the environment names one: a node's agent sets its node's)
    os.environ.setdefault(INBOX_PREFIX_ENV, user_inbox(name))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ctx = await start_service(name, settings, build)
    if settings.metrics_port:
        await _serve_metrics(ctx, settings)
    log.info("%s ready", name)
    await ctx.nc.publish(f"{READY_SUBJECT}.{name}", b"")  # `gpuledger up` waits for these
    lower_when_ready()  # off the claim path: full priority only while starting (priority.py)
    waiter = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([waiter, *ctx.tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                raise task.exception()
    finally:
        waiter.cancel()
        await stop_service(ctx)


async def _serve_metrics(ctx: ServiceContext, settings: Settings) -> None:
    """/metrics on its port; a port someone else took (another program, or a race between two
    starts picking free ports) costs the metrics, said loudly, never the service: a service that
    exited on it was restarted into the same taken port until its supervisor gave up."""
    try:
        server = await ctx.metrics.serve(settings.metrics_port, settings.metrics_host)
    except OSError as err:
        log.error("%s: cannot serve metrics on %s:%d (%s); running without /metrics", ctx.name,
                  settings.metrics_host, settings.metrics_port, err.strerror or err)
        return
    ctx.on_stop.append(_closer(server))
    log.info("%s: metrics on http://%s:%d/metrics", ctx.name, settings.metrics_host, settings.metrics_port)


def _closer(server) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        server.close()
        await server.wait_closed()

    return close
