"""The latest message of each subject of a stream (a key-value bucket's current values): read
once, or watched (the current ones first, then every new one as it is stored)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from nats.js import api
from nats.js.errors import NotFoundError

log = logging.getLogger("gpuledger")
CHECK_EVERY_S = 5.0


def _latest_config(filter_subjects: list[str], name: str | None = None) -> api.ConsumerConfig:
    if len(filter_subjects) == 1:
        # one filter: a named consumer, so its create request names the filter in its subject
        # ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>) and a user's permissions can allow
        # watching its own key only (a node agent: shared.nats_auth.node_role)
        return api.ConsumerConfig(name=name or _fresh_name(), deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                                  filter_subject=filter_subjects[0])
    # several filters: one consumer for the keys of every node a process hosts
    return api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                              filter_subjects=list(filter_subjects))


def _fresh_name() -> str:
    return "latest-" + secrets.token_hex(8)


async def _subscribe_ordered(js, stream: str, config: api.ConsumerConfig, on_msg, fixed: bool = False):
    subject = config.filter_subject or ""  # nats-py sets the filter to the subject given here
    if fixed:  # a consumer of this name left by an earlier run (or a gap) would clash
        await _delete_quietly(js, stream, config.name)
    sub = await js.subscribe(subject, cb=on_msg, ordered_consumer=True, stream=stream, config=config,
                             idle_heartbeat=5.0)
    if fixed:
        _same_name_on_reset(sub, js, stream)
    elif config.name:
        _fresh_name_on_reset(sub)
    return sub


async def _delete_quietly(js, stream: str, name: str) -> None:
    try:
        await js.delete_consumer(stream, name)
    except NotFoundError:
        pass


def _same_name_on_reset(sub, js, stream: str) -> None:
    """A watch under a fixed name (so a user's permissions can name the one consumer it may see,
    remake and delete: a node agent may not touch another node's watch) is remade under the same
    name after a gap: the old consumer is deleted first."""
    jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
    if jsi is None or not hasattr(jsi, "recreate_consumer"):
        return
    recreate = jsi.recreate_consumer

    async def recreate_same() -> None:
        try:
            await _delete_quietly(js, stream, jsi._ccreq.name)
        except Exception as err:  # the server is away: the create below fails and says so too
            log.warning("removing the old watch %s failed: %s", jsi._ccreq.name, err)
        await recreate()

    jsi.recreate_consumer = recreate_same


def _fresh_name_on_reset(sub) -> None:
    """nats-py's ordered consumer makes its consumer again after a gap with the same config; a
    named one would clash with the old consumer (still there until it has been idle a while), so
    each remake gets a new name."""
    jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
    if jsi is None or not hasattr(jsi, "recreate_consumer"):
        return
    recreate = jsi.recreate_consumer

    async def recreate_named() -> None:
        jsi._ccreq.name = _fresh_name()
        await recreate()

    jsi.recreate_consumer = recreate_named


async def watch_latest(js, stream: str, filter_subjects: list[str],
                       on_msg: Callable[[object], Awaitable[None]], name: str | None = None):
    """An ordered consumer: the last message of each matching subject, then each new one. `name`
    (one filter only): the consumer's fixed name, taken over from an earlier holder."""
    return await _subscribe_ordered(js, stream, _latest_config(filter_subjects, name), on_msg,
                                    fixed=name is not None and len(filter_subjects) == 1)


class LatestWatch:
    """`watch_latest` that keeps going: nats-py's ordered consumer recreates its consumer after a
    gap or a missed heartbeat, but once, in the background, and a creation that times out (a busy
    server, thousands of filter subjects) leaves it silent for good. This one checks its consumer
    now and then and makes a new one from the last sequence it saw when it is gone."""

    def __init__(self, js, stream: str, filter_subjects: list[str],
                 on_msg: Callable[[object], Awaitable[None]], name: str | None = None):
        self.js, self.stream, self.filters, self.on_msg = js, stream, list(filter_subjects), on_msg
        self.name = name if len(self.filters) == 1 else None  # see `watch_latest`
        self.last_seq = 0  # the last stream sequence handed over
        self.restarts = 0
        self._sub = None

    async def _seen(self, msg) -> None:
        self.last_seq = max(self.last_seq, msg.metadata.sequence.stream)
        await self.on_msg(msg)

    async def _subscribe(self) -> None:
        config = _latest_config(self.filters, self.name)
        if self.last_seq:  # the latest per subject was seen: everything after it, in order
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self.last_seq + 1
        self._sub = await _subscribe_ordered(self.js, self.stream, config, self._seen, fixed=self.name is not None)

    async def start(self) -> None:
        """Make the consumer now (so a caller can say it is ready once records will be seen); on
        NATS trouble `run` tries again."""
        try:
            await self._subscribe()
        except Exception as err:  # run() retries
            log.warning("watching %s failed (%s); again in %.0f s", self.stream, err, CHECK_EVERY_S)

    async def run(self) -> None:
        try:
            while True:
                if self._sub is None:
                    try:
                        await self._subscribe()
                    except Exception as err:  # NATS trouble: try again after the pause
                        log.warning("watching %s failed (%s); again in %.0f s", self.stream, err, CHECK_EVERY_S)
                await asyncio.sleep(CHECK_EVERY_S)
                if self._sub is not None and not await self._alive():
                    self.restarts += 1
                    await self._drop()
        finally:
            await self._drop()

    async def _alive(self) -> bool:
        try:
            await self._sub.consumer_info()
            return True
        except Exception as err:  # gone (never made again, or deleted), or the server is away
            log.warning("the consumer watching %s is gone (%s): making a new one", self.stream, err)
            return False

    async def _drop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # the connection is closing: the subscription goes with it
                pass


async def latest_per_subject(js, stream: str, filter_subjects: list[str], timeout: float = 30.0,
                             name: str | None = None) -> dict[str, tuple[int, bytes]]:
    """subject -> (stream sequence, payload) of the last message on each matching subject."""
    found: dict[str, tuple[int, bytes]] = {}
    done = asyncio.Event()

    async def on_msg(msg) -> None:
        found[msg.subject] = (msg.metadata.sequence.stream, msg.data)
        if msg.metadata.num_pending == 0:
            done.set()

    sub = await watch_latest(js, stream, filter_subjects, on_msg, name)
    try:
        info = await sub.consumer_info()
        if info.num_pending or info.delivered.consumer_seq:
            await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
    return found
