"""JetStream publishes without waiting for each acknowledgement: the acks come back on an inbox
of our own and are handed to a callback; one that does not come within `timeout` is reported
as an error (the message may still have been stored: callers publish idempotently)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from shared.direct_sub import subscribe_direct

# (stream sequence or 0, JetStream err_code or 0, description) -> None
OnAck = Callable[[int, int, str], None]
NO_ANSWER = -1  # err_code for an acknowledgement that did not come in time


@dataclass(slots=True)
class _Waiting:
    on_ack: OnAck
    sent: float


class PipelinedPublisher:
    def __init__(self, nc, timeout: float = 5.0):
        self.nc, self.timeout = nc, timeout
        self._waiting: dict[str, _Waiting] = {}
        self._ids = itertools.count()
        self._inbox = ""
        self._sub = None

    async def start(self) -> None:
        self._inbox = self.nc.new_inbox()
        # acks handed over as they are parsed: no Msg, queue or task per ack (shared.direct_sub)
        self._sub = await subscribe_direct(self.nc, self._inbox + ".*", self._on_reply)

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # the connection is closing: the subscription goes with it
                pass

    async def publish(self, subject: str, data: bytes, headers: dict[str, str] | None, on_ack: OnAck) -> None:
        token = str(next(self._ids))
        self._waiting[token] = _Waiting(on_ack, time.monotonic())
        await self.nc.publish(subject, data, reply=f"{self._inbox}.{token}", headers=headers)

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    def expire(self) -> None:
        """Report the acks that are overdue (call now and then)."""
        now = time.monotonic()
        for token, waiting in list(self._waiting.items()):
            if now - waiting.sent > self.timeout:
                del self._waiting[token]
                waiting.on_ack(0, NO_ANSWER, "no acknowledgement")

    def _on_reply(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, headers) -> None:
        waiting = self._waiting.pop(subject.rsplit(b".", 1)[-1].decode(), None)
        if waiting is not None:
            waiting.on_ack(*parse_ack(data, headers))


def parse_ack(data: bytes, headers: dict | None = None) -> tuple[int, int, str]:
    """(sequence, 0, '') for a stored message, (0, err_code, description) for a refusal."""
    if headers and headers.get("Status") == "503":
        return 0, 503, "no responders: the stream is not there"
    try:
        reply = json.loads(data)
    except ValueError:
        return 0, NO_ANSWER, f"not a JetStream acknowledgement: {data[:80]!r}"
    error = reply.get("error")
    if error:
        return 0, int(error.get("err_code") or error.get("code") or NO_ANSWER), str(error.get("description", error))
    return int(reply.get("seq", 0)), 0, ""
