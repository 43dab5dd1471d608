"""Request/reply command handling on faststream: raw bytes in, typed command, `Reply` out.

Every handler answers; nothing a client sends can crash the subscriber. A malformed or invalid
command gets `Reply(ok=False, error={code: invalid, field, message})` naming the field.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from nats.aio.msg import Msg

from schemas.commands import Reply, fail
from schemas.strict_json import DuplicateKeyError, check_no_duplicate_keys
from schemas.wording import in_words, whole_payload_words
from shared.direct_sub import subscribe_direct
from shared.natscluster import ANSWERED_PREFIX
from shared.publish_many import publish_many
from shared.telemetry import extract_context, tracer

log = logging.getLogger("gpuledger")
# "... - at `$.models[0]`", or for a dict key "... - at `key` in `$.node_selector`"
_AT = re.compile(r"(?:at|in) `\$\.?([^`]*)`")
_encoder = msgspec.json.Encoder()


class DomainError(Exception):
    """A command that is well-formed but not acceptable (unknown claim, conflicting update...)."""

    def __init__(self, code: str, message: str, field: str = ""):
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


# Answers go to inboxes only. nats-server lets a service publish on the reply subject of any
# request it receives (`allow_responses`), whatever that subject is: a publisher's request to
# gpu.cmd.claim.submit naming `gpu.evt.decision`, another claim's subject or another claim's
# outcome subject as its reply had the claim service write its answer there (into the ledger, or
# over that claim's outcome, the latest per subject). Every client gpuledger knows replies on an
# inbox (`_INBOX.`, nats-py's, nats.js' and Go's default, or `_INBOX_<user>.`); a request naming
# any other reply subject is handled (a submit is still taken) but not answered, and counted.
# A request from the publishers' account (PUBLIC, shared.nats_auth) arrives through a service
# import with nats-server's own reply subject `_R_.<token>`, which carries the answer back to the
# asker's inbox in PUBLIC: nothing in the ledger's account listens there.
REPLY_PREFIX = ANSWERED_PREFIX  # "_INBOX": the one prefix a client may set (shared.natscluster)
IMPORT_REPLY_PREFIX = "_R_."
LOUD_FIRST, LOUD_EVERY = 20, 1000
unanswered = 0  # requests not answered because of their reply subject (this process)


def answerable(reply: str, subject: str) -> bool:
    """Whether a reply may go to `reply` (a request that arrived on `subject`); says why not."""
    global unanswered
    if not reply or reply.startswith((REPLY_PREFIX, IMPORT_REPLY_PREFIX)):
        return True
    unanswered += 1
    if unanswered <= LOUD_FIRST or unanswered % LOUD_EVERY == 0:
        log.warning("not answering a request on %s: its reply subject %r is no inbox (replies go to "
                    "%s... subjects only; %d so far)", subject, reply[:200], REPLY_PREFIX, unanswered)
    return False


async def raw_body(msg) -> tuple[bytes, dict, str]:
    # faststream's default decoder would parse JSON first; we decode once, typed, with msgspec.
    # The subject the request arrived on: a wildcard subscription learns which one it was.
    subject = getattr(msg.raw_message, "subject", "")
    if not answerable(msg.reply_to, subject):
        msg.reply_to = ""  # faststream answers only a message with a reply subject
    return msg.body, dict(msg.headers or {}), subject


_UNKNOWN = re.compile(r"(?:unknown|missing required) field `([^`]*)`")


def field_of(error: Exception) -> str:
    """The field an error is about, as a path like `models[0]` ("" for the message as a whole)."""
    if isinstance(error, DuplicateKeyError):
        return error.field
    text = str(error)
    match, unknown = _AT.search(text), _UNKNOWN.search(text)
    path = match.group(1) if match else ""
    if unknown:  # the unknown or missing field itself, not the object that holds it
        return f"{path}.{unknown.group(1)}" if path else unknown.group(1)
    return path


def invalid_reply(error: Exception, body: bytes = b"", decode: Callable[[bytes], Any] | None = None) -> Reply:
    """The refusal of a command `decode` could not read from `body`, naming the field."""
    whole = whole_payload_words(str(error), body)
    if whole:
        return fail("invalid", whole)
    if isinstance(error, msgspec.ValidationError):
        field = field_of(error)
        return fail("invalid", in_words(str(error)), name_the_key(field, body, decode) if decode else field)
    if isinstance(error, UnicodeDecodeError):
        return fail("invalid", f"malformed JSON: not valid UTF-8 (at byte {error.start})")
    if isinstance(error, RecursionError):
        return fail("invalid", "malformed JSON: nested too deep")
    return fail("invalid", f"malformed JSON: {error}")


def name_the_key(field: str, body: bytes, decode: Callable[[bytes], Any]) -> str:
    """`labels.team` for msgspec's `labels[...]`, which says a map holds a bad value but not under
    which key: the map is tried one entry at a time until one fails at the same place."""
    path = field.removesuffix("[...]")
    names = path.split(".")
    if path == field or not all(name.isidentifier() for name in names):
        return field
    try:
        raw = msgspec.json.decode(body)
    except Exception:  # a value nested too deep to read: the map is all that can be named
        return path
    holder = raw
    for name in names[:-1]:
        holder = holder.get(name) if isinstance(holder, dict) else None
    entries = holder.get(names[-1]) if isinstance(holder, dict) else None
    for key, value in entries.items() if isinstance(entries, dict) else ():
        holder[names[-1]] = {key: value}
        try:
            decode(msgspec.json.encode(raw))
        except Exception as err:  # msgspec's errors
            if field_of(err) == field:
                return f"{path}.{key}"
    return path


def encode_reply(reply: Reply) -> bytes:
    return _encoder.encode(reply)


def command(broker, subject: str, command_type: type,
            handler: Callable[..., Awaitable[Reply]], decode: Callable[[bytes], Any] | None = None,
            with_subject: bool = False, **subscriber_kwargs) -> None:
    """Register `handler` for typed commands on `subject` (request/reply). `decode` replaces the
    typed decoding (a command with a second spelling); it raises msgspec errors like a decoder.
    `with_subject`: the handler is called as `handler(command, subject_it_arrived_on)` (for a
    wildcard `subject`)."""
    decoder = _Strict(msgspec.json.Decoder(command_type).decode if decode is None else decode)

    @broker.subscriber(subject, decoder=raw_body, **subscriber_kwargs)
    async def _handle(raw: Any) -> bytes:
        body, headers, arrived_on = raw
        with tracer().start_as_current_span(subject, context=extract_context(headers)):
            return await _answer(body, arrived_on)

    async def _answer(body: bytes, arrived_on: str) -> bytes:
        try:
            cmd = decoder.decode(body)
        except Exception as err:  # msgspec's errors, invalid UTF-8 (ValueError), nesting (RecursionError)
            return encode_reply(invalid_reply(err, body, decoder.decode))
        try:
            reply = await (handler(cmd, arrived_on) if with_subject else handler(cmd))
        except DomainError as err:
            reply = fail(err.code, err.message, err.field)
        except Exception as err:  # a bug must not kill the subscriber; the client gets an answer
            log.exception("command on %s failed", subject)
            reply = fail("internal", f"{type(err).__name__}: {err}")
        return encode_reply(reply)


class _Strict:
    """A command decoder that also refuses a key written twice in one object (schemas/strict_json)."""

    def __init__(self, decode: Callable[[bytes], Any]):
        self._decode = decode

    def decode(self, body: bytes) -> Any:
        command = self._decode(body)
        check_no_duplicate_keys(body)
        return command


# --- commands answered a batch at a time (nats-py directly) ---------------------------------------

BATCH_MAX = 1000  # requests handled together at most


async def batched_command(nc, subject: str, command_type: type,
                    handle_many: Callable[[list[Any]], Awaitable[list[Reply]]],
                    spawn: Callable[[Any, str], Any], with_subject: bool = False, queue: str = "",
                    linger_s: float = 0.0) -> Any:
    """Answer the requests on `subject` a batch at a time: whatever arrived while the previous
    batch was being handled goes to `handle_many` together (one reply per command, in order), so
    a handler that appends can append once per batch instead of once per request. A malformed
    request is answered on its own (invalid, naming the field) and never reaches `handle_many`.
    Subscribed through nats-py, not faststream: faststream's per-message dispatch cost more CPU
    than the command itself (DESIGN.md). `spawn(coro, name)` runs the worker (ServiceContext.spawn).
    `with_subject`: `handle_many` gets (command, subject it arrived on) pairs (a wildcard
    `subject`). `queue`: a queue group, so that each request is handled by one replica of the
    service, not by every one. `linger_s`: a batch's first request waits this long for more (fewer,
    bigger batches below saturation, each answer that much later). Returns the subscription."""
    decoder = _Strict(msgspec.json.Decoder(command_type).decode)
    arrivals: asyncio.Queue = asyncio.Queue()

    def arrived(sid: int, subject: bytes, reply: bytes, data: bytes, headers) -> None:
        arrivals.put_nowait(Msg(_client=nc, subject=subject.decode(), reply=reply.decode(), data=data,
                             headers=headers, _sid=sid))

    async def work() -> None:
        while True:
            msgs = [await arrivals.get()]
            if linger_s > 0:
                await asyncio.sleep(linger_s)
            while not arrivals.empty() and len(msgs) < BATCH_MAX:
                msgs.append(arrivals.get_nowait())
            await _answer_batch(msgs)

    async def _answer_batch(msgs: list) -> None:
        commands, answered = [], []
        for msg in msgs:
            try:
                decoded = decoder.decode(msg.data)
                commands.append((decoded, msg.subject) if with_subject else decoded)
                answered.append(msg)
            except Exception as err:  # msgspec's errors, invalid UTF-8, nesting
                await _respond(msg, encode_reply(invalid_reply(err, msg.data, decoder.decode)))
        if not commands:
            return
        with tracer().start_as_current_span(subject) as span:  # one span per batch
            span.set_attribute("gpuledger.commands", len(commands))
            try:
                replies = await handle_many(commands)
            except Exception as err:  # a bug must not kill the worker; every client gets an answer
                log.exception("commands on %s failed", subject)
                replies = [fail("internal", f"{type(err).__name__}: {err}")] * len(commands)
        await _respond_all(nc, [(msg, encode_reply(reply)) for msg, reply in zip(answered, replies)])

    spawn(work(), f"batched {subject}")
    # requests handed over as they are parsed, straight to the batch's queue: not through the
    # subscription's own queue and task first (shared.direct_sub; one request per claim released)
    return await subscribe_direct(nc, subject, arrived, queue=queue)


async def _respond_all(nc, answers: list[tuple[Any, bytes]]) -> None:
    """Each (request, answer) as `_respond` would, the answers to requests without headers in one
    buffer write (one request per claim released: shared.publish_many); `Msg.respond` sends a
    request's headers back with its answer, so those go that way."""
    sendable = []
    for msg, data in answers:
        if msg.headers:
            await _respond(msg, data)
        elif msg.reply and answerable(msg.reply, msg.subject):
            sendable.append((msg.reply, "", data))
    try:
        refused = await publish_many(nc, sendable)
    except Exception as err:  # the connection is going: the clients time out and ask again
        log.warning("could not answer %d requests on %s: %s", len(sendable), answers[0][0].subject, err)
        return
    for index, err in refused:
        log.warning("could not answer on %s: %s", sendable[index][0], err)


async def _respond(msg, data: bytes) -> None:
    if msg.reply and answerable(msg.reply, msg.subject):
        try:
            await msg.respond(data)
        except Exception as err:  # the connection is going: the client times out and asks again
            log.warning("could not answer on %s: %s", msg.subject, err)
