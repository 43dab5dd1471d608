"""What a fold believes of a stored message: decoded, and admitted by the writer-authority table.

Every path that folds stored events reads them through here (the one `Follower`, the projector's
replay, `bench replay`), so they all agree on what the log says. A message is skipped, logged and
counted, never fatal, when it
- does not decode at all (not JSON, an unknown event type): `undecodable` (one the strict types
  refuse only for a constraint added after it was stored is decoded without constraints instead:
  `lenient`, see `schemas.lenient`);
- arrived on a subject its type does not belong to (`schemas.authority`): `refused`, a forgery or
  a writer's bug, and folding it would let anyone who can publish somewhere speak for anyone;
- sits on a dead-letter subject: a record of a refusal for people, never folded (not counted);
and an event whose fold raises is skipped the same way (`unfoldable`), never stalling the service.
"""

from __future__ import annotations

import logging

import msgspec

from schemas import authority
from schemas import events as ev
from schemas.lenient import decode_lenient

log = logging.getLogger("gpuledger")
LOUD_FIRST = 20  # log each kind of skip this many times, then every LOUD_EVERY-th: a flood of
LOUD_EVERY = 1000  # forgeries must not become a flood of log lines


class Admission:
    """Counters of what was not believed (exposed by the services that own one)."""

    def __init__(self) -> None:
        self.undecodable = 0
        self.refused = 0
        self.unfoldable = 0
        self.lenient = 0  # decoded without the constraints they predate (`schemas.lenient`)

    def fold_failed(self, seq: int, event: ev.Event, err: Exception) -> None:
        """An event whose fold raised: logged, counted and skipped (what it changed before it
        raised stays; the fold's own checks keep that within capacity)."""
        self.unfoldable += 1
        if loud(self.unfoldable):
            log.error("skipping %s at seq=%d: folding it failed: %s: %s (%d so far)", type(event).__name__,
                      seq, type(err).__name__, err, self.unfoldable, exc_info=self.unfoldable == 1)

    def read(self, seq: int, subject: str, data: bytes) -> ev.Event | None:
        """The event to fold for one stored message, or None to skip it."""
        try:
            event = ev.decode_event(data)
        except msgspec.ValidationError as err:  # perhaps stored before a constraint was added
            event = self._lenient(seq, subject, data, err)
            if event is None:
                return None
        except Exception as err:  # msgspec.DecodeError, invalid UTF-8, nested too deep
            return self._undecodable(seq, subject, err)
        return self.admit(seq, subject, event)

    def _lenient(self, seq: int, subject: str, data: bytes, strict_error: Exception) -> ev.Event | None:
        """A stored event the strict types refuse, read without their constraints
        (`schemas.lenient`): the log is immutable, so a bound added since must not change what
        a replay folds."""
        try:
            event = decode_lenient(data)
        except Exception:
            return self._undecodable(seq, subject, strict_error)
        self.lenient += 1
        if loud(self.lenient):
            log.info("seq=%d on %s predates a constraint it breaks (%s): folded as stored (%d so far)",
                     seq, subject, strict_error, self.lenient)
        return event

    def admit(self, seq: int, subject: str, event: ev.Event) -> ev.Event | None:
        """`event` if a fold may believe it on `subject`, else None (counted when forged)."""
        if authority.admits(subject, event):
            return event
        if not authority.folded(subject):
            return None
        self.refused += 1
        if loud(self.refused):
            log.warning("refusing %s at seq=%d: subject %s is not one its writer may use "
                        "(schemas/authority.py; %d refused so far)", type(event).__name__, seq,
                        subject, self.refused)
        return None

    def _undecodable(self, seq: int, subject: str, err: Exception) -> None:
        self.undecodable += 1
        if loud(self.undecodable):
            log.warning("skipping undecodable message seq=%d subject=%s: %s (%d so far)", seq,
                        subject, err, self.undecodable)
        return None


def loud(count: int) -> bool:
    """Whether the `count`-th skip of a kind is logged."""
    return count <= LOUD_FIRST or count % LOUD_EVERY == 0


def read_batch(admission: Admission, batch) -> list[tuple[int, ev.Event | None]]:
    """(seq, event) for each (seq, subject, payload, headers) of a stored batch, None where the
    fold must skip. One loop, no call per message around the common case."""
    decode, admits, out = ev.decode_event, authority.admits, []
    append = out.append
    for seq, subject, data, _headers in batch:
        try:
            event = decode(data)
        except Exception:  # say which and why, and count it
            append((seq, admission.read(seq, subject, data)))
            continue
        append((seq, event if admits(subject, event) else admission.admit(seq, subject, event)))
    return out
