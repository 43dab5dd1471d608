"""The durable intake: other systems publish a JSON ClaimSpec to `gpu.intake.claim`.

The subject belongs to a JetStream work-queue stream, so a claim the publisher got an ack for is
stored before anyone looks at it. The claim service drains it with a durable pull consumer: a
valid claim becomes `ClaimSubmitted` (message id = claim id, so a retried publish is stored once;
the claims of one drained fetch go together in one EventBatch, see `handle_intake_batch`);
an invalid one becomes `ClaimRejected` naming the field, on the claim's subject when the id is
readable and on the dead-letter subject always. Either way the intake message is acked only after
its outcome is in the log, so nothing accepted is lost and nothing bad blocks what follows.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re

import msgspec
import nats.errors
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from schemas import events as ev
from schemas import subjects, systems
from schemas.outcomes import encode_outcome
from schemas.seed import CLAIM_WIRE, SeedClaimSpec, convert_seed, from_seed_claim, is_seed_claim, seed_field
from schemas.strict_json import check_no_duplicate_keys
from schemas.types import ClaimSpec, Reason
from schemas.wording import bounded, bounded_field, in_words, whole_payload_words
from shared import jsreply
from shared.commands import DomainError, field_of, name_the_key
from shared.eventlog import AppendConflict
from shared.publish_many import publish_many
from shared.retry import TRANSIENT, Backoff
from shared.telemetry import inject_headers, tracer

from services.claim.intake_fence import SubmitFence
from services.claim.intake_pull import StandingPull
from services.claim.intake_stamps import CURRENT as STAMPS, IntakeStamps
from services.claim.outcome_view import rejected_outcome

log = logging.getLogger("gpuledger.claim")
DURABLE = "claim-intake"
SYSTEMS_DURABLE = "claim-intake-systems"  # gpu.intake.claim.<system>: the publishing systems' own
# A message handled without an answer this often (the service died on it each time) is not
# delivered again; one that fails with an error is dead-lettered and terminated at once.
MAX_DELIVER = 20
# From this delivery on, a message is not handled any more but dead-lettered with that reason
# and terminated: the deliveries left before MAX_DELIVER are for writing that dead letter through
# NATS trouble, so a message is never dropped by the server without a word.
GIVE_UP_AT = MAX_DELIVER - 5
# How long a handled batch's acks wait for the next claim to go out with (`consume_intake`): a
# message not acked is delivered again only after `ack_wait` (30 s), and `wait_intake_drained`
# (a lookup of an id not known yet) waits this much longer at most.
ACKS_WAIT_S = 0.02
# While claims keep coming (the last batch was taken less than LINGER_FLOWING_S ago), a batch of
# fewer than LINGER_BELOW claims waits LINGER_S for more before it is appended. Below saturation a
# batch was one or two claims (1.1 at 300/s, 1.5 on a quiet machine at 1,000/s), and each batch is a
# submit message every follower reads, a decision pass and a decision batch every follower reads:
# at 300/s two messages per claim of the ledger's 3.5 (docs/benchmarks.md, "Session 35, speed-cost").
# A claim that comes alone, after a quiet spell, is not held. 1 ms, not 2: the lead's quiet pairs at
# 1,000/s gave p50 3.8-4.98 ms at 2 ms (issue 9 asks under 5) and 3.45-3.52 at 1 ms, for CPU per
# claim 1.31-1.54 and 1.56-1.57 (1.65-1.76 with none).
LINGER_S = 0.001
LINGER_BELOW = 8
LINGER_FLOWING_S = 0.05
DEFAULT_MAX_PAYLOAD = 1 << 20  # NATS's default max_payload
ENVELOPE_BYTES = 16 * 1024  # headers, the EventBatch's own fields
# NATS trouble: nothing is acked and the messages come again. Not a message over the size limit,
# which would fail the same way every time.
_TRANSIENT = (NatsTimeout, nats.errors.ConnectionClosedError, nats.errors.NoServersError,
              nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
              nats.errors.OutboundBufferLimitError, asyncio.TimeoutError, OSError)
_spec_decoder = msgspec.json.Decoder(ClaimSpec)
_ACK = b"+ACK"  # what nats-py's `Msg.ack` publishes on a JetStream message's reply subject


async def consume_intake(js, service, batch: int = 256, subject: str = subjects.INTAKE_CLAIMS,
                         durable: str = DURABLE) -> None:
    # a pull request always standing: what is published while a batch is handled is here when
    # it ends, not one round trip later (intake_pull.py)
    sub = StandingPull(js, subject, durable, subjects.INTAKE_STREAM,
                       api.ConsumerConfig(ack_wait=30, max_deliver=MAX_DELIVER), batch)
    await sub.start()
    backoff = Backoff()
    # A batch's acks (due once it is folded) wait up to ACKS_WAIT_S for the next claim: published
    # just before that batch's append, they go out in the same socket write, one write of this
    # service and one wake-up of nats-server fewer per batch (at 1,000 claims/s a batch is one or
    # two claims, and the next is there within a few ms). A claim waits only LINGER_S, and only
    # while claims keep coming (above).
    unacked: list = []
    loop, last_taken = asyncio.get_running_loop(), float("-inf")
    try:
        while True:
            msgs = await sub.take(batch, timeout=ACKS_WAIT_S if unacked else 1.0)
            if msgs:
                taken, last_taken = last_taken, loop.time()
                if len(msgs) < min(LINGER_BELOW, batch) and last_taken - taken < LINGER_FLOWING_S:
                    msgs += await _lingered(sub, batch - len(msgs))
            if unacked:
                unacked = await _ack(unacked)
            if not msgs:
                continue
            if service.on_intake_batch is not None:
                service.on_intake_batch(len(msgs))
            stamping = STAMPS.set(IntakeStamps.of_batch(msgs)) if sub.stamp else None  # bench e2e --hops
            try:
                unacked = await handle_fetched(service, msgs, ack=False)
            except _TRANSIENT + TRANSIENT as err:  # nothing acked: the messages come again
                await _nak(msgs)
                await _pause(backoff, "handling an intake batch", err)
                continue
            finally:
                if stamping is not None:
                    STAMPS.reset(stamping)
            backoff.reset()
    finally:
        if unacked:
            await _ack(unacked)
        # an open pull inbox would make the connection's drain wait its full timeout on stop
        await sub.stop()


async def _lingered(sub, room: int) -> list:
    """What arrives within LINGER_S, up to `room` messages."""
    await asyncio.sleep(LINGER_S)
    return await sub.take(room) if sub.waiting else []


async def _ack(msgs) -> list:
    """Ack messages whose claims are folded; nothing is left to ack after. An ack NATS trouble
    loses only brings the message again after `ack_wait`, and a claim already in the log is not
    appended twice (`handle_intake_batch`)."""
    client = getattr(msgs[0], "_client", None) if msgs else None
    try:
        if client is None:  # not nats-py's messages (a test's): each its own ack
            for msg in msgs:
                await msg.ack()
        else:  # in one buffer write for all (shared.publish_many), as `msg.ack()` would send each
            await publish_many(client, [(msg.reply, "", _ACK) for msg in msgs if msg.reply])
    except Exception as err:
        log.debug("intake acks not sent (%s): those messages come again", err)
    return []


async def _nak(msgs) -> None:
    """Ask for the messages again now rather than after `ack_wait` (best effort: NATS may be
    the trouble, and then they come again after `ack_wait` anyway)."""
    for msg in msgs:
        try:
            await msg.nak()
        except Exception:
            return


async def _pause(backoff: Backoff, what: str, err: Exception) -> None:
    delay = backoff.next(err)
    log.warning("%s failed (%s: %s); again in %.1f s", what, type(err).__name__, err, delay)
    await asyncio.sleep(delay)


async def handle_fetched(service, msgs, ack: bool = True) -> list:
    """One fetch, all together; should that fail for any reason but NATS trouble, each message on
    its own: the one that cannot be handled is dead-lettered (once, with the error) and terminated,
    and every other message goes through. NATS trouble propagates: nothing is acked, so the
    messages come again. With `ack=False` the messages handled together are returned, folded and
    not yet acked, for the caller to ack (`consume_intake`); every other one is acked or terminated
    here either way."""
    msgs = await _give_up_on_redelivered(service, msgs)
    if not msgs:
        return []
    drained = [(m.data, dict(m.headers or {}), _stream_seq(m), _system(m)) for m in msgs]
    try:
        await handle_intake_batch(service, drained)
    except _TRANSIENT:
        raise
    except Exception:
        log.exception("intake batch of %d failed; handling its messages one by one", len(msgs))
        for msg, one in zip(msgs, drained):
            await _handle_alone(service, msg, one)
        return []
    if not ack:
        return msgs
    for msg in msgs:
        await msg.ack()
    return []


async def _handle_alone(service, msg, one: tuple) -> None:
    try:
        await handle_intake_batch(service, [one])
    except _TRANSIENT:
        raise
    except Exception as err:  # poison: recorded once, never delivered again
        data, headers, seq, system = one
        await _dead_letter(service, _readable_id(data, headers), "unprocessable",
                           f"the claim service could not handle this message: {type(err).__name__}: {err}",
                           "", data, seq, system)
        await msg.term()
        return
    await msg.ack()


async def _give_up_on_redelivered(service, msgs) -> list:
    """Dead-letter and terminate the messages delivered GIVE_UP_AT times or more (each delivery
    ended without an answer: the service died or hung on it); the others, to handle."""
    keep = []
    for msg in msgs:
        delivered = _deliveries(msg)
        if delivered < GIVE_UP_AT:
            keep.append(msg)
            continue
        data, headers = msg.data, dict(msg.headers or {})
        async with _fence(service).lock:  # its refusal may go on the claim's subject: fenced there
            await _reject(service, _readable_id(data, headers), "undeliverable",
                          f"delivered {delivered} times without being handled (the claim service stopped "
                          "or failed on it each time): not tried again", "", data, {}, _stream_seq(msg),
                          _system(msg))
        await msg.term()
    return keep


def _system(msg) -> str:
    """The publishing system a message came from: its subject's last token under the intake
    subject, which only that system's NATS user may publish on (schemas/systems.py); never a
    header or a field of the payload, which the publisher writes."""
    return systems.of_subject(getattr(msg, "subject", "") or "", subjects.INTAKE_CLAIMS)


def _deliveries(msg) -> int:
    try:
        return jsreply.delivered(msg) or 1
    except Exception:  # not from JetStream (tests)
        return 1


def _stream_seq(msg) -> int:
    try:
        return jsreply.stream_seq(msg)
    except Exception:  # a message not from JetStream (tests): no sequence to key a dead letter on
        return 0


async def wait_intake_drained(js, timeout: float = 5.0) -> None:
    """Until every intake message published before this call is handled: the stream is a work
    queue, so a message is gone once acked, and it is acked only after its outcome is folded. A
    message no consumer of ours takes (`gpu.intake.other`, `gpu.intake.claim.a.b`: only ops may
    publish there) stays in the stream for good, so the claim service's own consumers are asked
    too: once both have handled everything up to the call, the wait is over (else every lookup of
    an unknown id waited its whole timeout, for ever)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    state = (await js.stream_info(subjects.INTAKE_STREAM)).state
    target = state.last_seq
    while state.messages and state.first_seq <= target and loop.time() < deadline:
        if await _consumers_handled(js, target):
            return
        await asyncio.sleep(0.01)
        state = (await js.stream_info(subjects.INTAKE_STREAM)).state


async def _consumers_handled(js, target: int) -> bool:
    """Both intake consumers (the plain subject's, the systems') have handled every message of
    theirs up to stream sequence `target`: none left to deliver or to ack, or acked past it."""
    for durable in (DURABLE, SYSTEMS_DURABLE):
        try:
            info = await js.consumer_info(subjects.INTAKE_STREAM, durable)
        except nats.errors.Error:  # not made yet (or NATS trouble): not known to be handled
            return False
        done = (info.num_pending or 0) == 0 and (info.num_ack_pending or 0) == 0
        if not done and (info.ack_floor.stream_seq if info.ack_floor else 0) < target:
            return False
    return True


async def handle_intake_batch(service, messages: list[tuple]) -> None:
    """Everything one fetch drained, as (payload, headers[, intake sequence[, system]]): each message
    validated on its own (a refusal is recorded per claim), the new claims appended together, as
    one EventBatch when there are several (one message to write and to read back instead of one
    per claim), in as many batches as keep each under the server's message size. A claim repeated
    within the batch is kept once; one already in the log is not appended again, not even when
    another claim-service replica appended it a moment ago (`services/claim/intake_fence.py`)."""
    accepted: dict[str, ev.ClaimSubmitted] = {}
    specs: dict[str, ClaimSpec] = {}
    owners: dict[str, str] = {}  # claim id -> its system, for the claims in `specs` that have one
    taken: list[str] = []  # the ids this batch put in flight, to take out once folded (or failed)
    in_flight = _in_flight(service)
    try:
        await _take_batch(service, messages, accepted, specs, owners, in_flight, taken)
    finally:
        for claim_id in taken:  # folded by now (or failed, to come again): the fold answers for them
            in_flight.pop(claim_id, None)


def _in_flight(service) -> dict[str, tuple[ClaimSpec, str]]:
    """Claims this service took and has not folded yet, with their systems (`ClaimService.in_flight`),
    across its intake consumers (the plain intake's and the systems') and submit requests: each
    drains and appends on its own,
    and a claim one of them took is not in the fold until its batch is read back. The same new id
    taken by both at once was appended twice (session 33: 10 of 200 ids published at once by the
    shared publisher and a system), and the later claim (or, appended alone under its id as msg id,
    deduplicated away) never had an outcome."""
    in_flight = getattr(service, "in_flight", None)
    if in_flight is None:  # a stand-in service of a test
        in_flight = service.in_flight = {}
    return in_flight


def _fence(service) -> SubmitFence:
    fence = getattr(service, "fence", None)
    if fence is None:  # a stand-in service of a test
        fence = service.fence = SubmitFence(service.log, service.follower)
    return fence


async def _take_batch(service, messages: list[tuple], accepted: dict, specs: dict, owners: dict,
                      in_flight: dict, taken: list) -> None:
    fence = _fence(service)
    # checked and appended in one turn of the fence: the append is conditioned on the last claim
    # on the submit subject as it was before the checks (intake_fence.py)
    async with fence.lock:
        expected = fence.tip
        sources = await _check_batch(service, messages, accepted, specs, owners, in_flight, taken)
        last = await _append_fenced(service, fence, expected, accepted, specs, owners, sources)
    if last:
        await service.follower.wait_for_seq(last)


async def _check_batch(service, messages: list[tuple], accepted: dict, specs: dict, owners: dict,
                       in_flight: dict, taken: list) -> dict[str, tuple]:
    """Each message checked; the new claims in `accepted`, put in flight. Returns, per accepted
    claim, its message (payload, intake sequence, system), for a refusal should it be refused
    after all (another replica appended its id meanwhile)."""
    sources: dict[str, tuple] = {}
    with tracer().start_as_current_span("claim.intake") as span:  # one span per drained batch
        span.set_attribute("gpuledger.messages", len(messages))
        # the trace of a claim its publisher sent none: this span's, the same for the whole batch
        # (read once: reading it per claim was about a third of preparing the claim)
        current = inject_headers()
        stamps = STAMPS.get()
        for data, headers, *rest in messages:
            seq, system = rest[0] if rest else 0, rest[1] if len(rest) > 1 else ""
            event = await _accept(service, data, headers, specs, seq, system, owners, current, in_flight)
            if event is not None:
                claim_id = event.claim.claim_id
                accepted[claim_id], specs[claim_id] = event, event.claim
                in_flight[claim_id] = (event.claim, system)
                taken.append(claim_id)
                sources[claim_id] = (data, seq, system)
                if system:
                    owners[claim_id] = system
                if stamps is not None:
                    stamps.note(claim_id, seq)
    return sources


async def _append_fenced(service, fence: SubmitFence, expected: int, accepted: dict, specs: dict,
                         owners: dict, sources: dict) -> int:
    """The accepted claims on the submit subject, on condition that no claim came there after
    `expected`. Refused: the fold reads up to the claim that came, the claims not stored yet are
    checked again against it, and what is left is appended on condition of that one. Returns the
    last sequence appended (0: none)."""
    last = 0
    limit = _max_bytes(service.log)
    # the common case costs no encoding: a claim's event is its payload re-encoded (no longer
    # than twice it, even in the seed's spelling) plus a trace context and the event's own fields
    roomy = sum(len(sources[c][0]) for c in accepted) * 2 + 1024 * len(accepted) < limit
    waiting = list(accepted.values())
    while waiting:
        chunks = [waiting] if roomy else split_under(waiting, limit)
        try:
            for chunk in chunks:
                appended = await _append(service, fence, chunk, expected)
                last, expected = max(last, appended.seq), max(expected, appended.seq)
                stored = {e.claim.claim_id for e in chunk}
                waiting = [e for e in waiting if e.claim.claim_id not in stored]
        except AppendConflict as conflict:  # another replica's claims came first
            expected = await fence.caught_up(conflict)
            waiting = await _check_again(service, waiting, specs, owners, sources)
    return last


async def _check_again(service, events: list[ev.ClaimSubmitted], specs: dict, owners: dict,
                       sources: dict) -> list[ev.ClaimSubmitted]:
    """The claims still to append, checked against a fold that has read every claim before the
    next append's condition (each was checked against the others of its batch already): a repeat
    of a claim now in the fold is dropped, as it would have been had the fold had it at first; a
    conflict is refused as it would have been (`_refuse_prepared`)."""
    keep = []
    for event in events:
        spec = event.claim
        data, seq, system = sources[spec.claim_id]
        try:
            again = service.prepare(spec, event.trace or None, system=system, internal=True)
        except DomainError as err:
            await _refuse_prepared(service, err, spec.claim_id, data, specs, seq, system, owners)
            continue
        if again is not None:
            keep.append(event)
    return keep


async def _append(service, fence: SubmitFence, chunk: list[ev.ClaimSubmitted], expected: int):
    stamps = STAMPS.get()
    headers = stamps.headers([e.claim.claim_id for e in chunk]) if stamps is not None else None
    if len(chunk) == 1:
        claim_id = chunk[0].claim.claim_id
        return await fence.append(chunk[0], expected, msg_id=claim_id, headers=headers)
    return await fence.append(ev.EventBatch(events=chunk, at=service.clock()), expected,
                              msg_id=_batch_id([e.claim.claim_id for e in chunk]), headers=headers)


def _max_bytes(event_log) -> int:
    """What one appended message may hold: the server's limit (1 MiB by default) less room for
    headers and the batch's envelope."""
    nc = getattr(event_log, "nc", None)
    limit = getattr(nc, "max_payload", 0) or DEFAULT_MAX_PAYLOAD
    return max(limit - ENVELOPE_BYTES, ENVELOPE_BYTES)


def split_under(events: list[ev.ClaimSubmitted], limit: int) -> list[list[ev.ClaimSubmitted]]:
    """Consecutive runs of `events` whose EventBatch stays under `limit` bytes (one event alone
    is never split: a claim fits, its fields are bounded)."""
    sizes = [len(ev.encode_event(e)) + 1 for e in events]
    if sum(sizes) <= limit:
        return [events] if events else []
    chunks, current, used = [], [], 0
    for event, size in zip(events, sizes):
        if current and used + size > limit:
            chunks.append(current)
            current, used = [], 0
        current.append(event)
        used += size
    return chunks + [current]


async def _accept(service, data: bytes, headers: dict[str, str], specs: dict[str, ClaimSpec], seq: int = 0,
                  system: str = "", owners: dict[str, str] | None = None,
                  current_trace: dict[str, str] | None = None,
                  in_flight: dict[str, tuple[ClaimSpec, str]] | None = None) -> ev.ClaimSubmitted | None:
    # no span per claim (they cost a third of this service): the batch has one, and a publisher's
    # own trace context travels on in the claim's `trace`
    try:
        spec = decode_claim(data)
    except Exception as err:  # msgspec's errors, invalid UTF-8 (ValueError), nesting (RecursionError)
        await _reject(service, _readable_id(data, headers), "invalid", decode_error(err, data),
                      name_the_key(field_of(err), data, decode_claim), data, specs, seq, system, owners)
        return None
    trace = trace_of(headers)
    taken = in_flight.get(spec.claim_id) if in_flight else None
    if taken is not None and spec.claim_id not in specs:  # another consumer's batch has it, unfolded
        specs, owners = {**specs, spec.claim_id: taken[0]}, {**(owners or {}), spec.claim_id: taken[1]}
    try:
        return service.prepare(spec, trace or None, pending=specs, system=system, pending_owners=owners,
                               current_trace=current_trace)
    except DomainError as err:
        await _refuse_prepared(service, err, spec.claim_id, data, specs, seq, system, owners)
        return None


async def _refuse_prepared(service, err: DomainError, claim_id: str, data: bytes, specs: dict[str, ClaimSpec],
                           seq: int, system: str, owners: dict[str, str] | None) -> None:
    # the intake's payload is the claim itself: `gpus`, not the request's `claim.gpus`
    field = err.field.removeprefix("claim.")
    if _seed_spelled(data):  # answered in the names the publisher wrote
        field = seed_field(field, CLAIM_WIRE) if field else field
    await _reject(service, claim_id, err.code, err.message, field, data, specs, seq, system, owners)


def _held_by_another(service, claim_id: str, specs: dict[str, ClaimSpec], owners: dict[str, str] | None,
                     system: str) -> bool:
    """The id is a claim of another submitter (another system, or ops and the shared publisher
    for a system, or a system for them): its outcome is on another subject than this sender's, so
    the sender's stays empty unless the refusal is written there (`_outcome_of_refusal`)."""
    if not claim_id:
        return False
    if claim_id in service.state.claims or claim_id in service.state.ended:
        return service.owner(claim_id) != system
    if claim_id in specs:
        return (owners or {}).get(claim_id, "") != system
    taken = _in_flight(service).get(claim_id)  # another consumer's batch, or a submit
    return taken is not None and taken[1] != system


def _seed_spelled(data: bytes) -> bool:
    return b'"claimId"' in data and is_seed_claim(msgspec.json.decode(data))


def decode_error(err: Exception, data: bytes = b"") -> str:
    """What was wrong with a payload, in words a publisher can act on."""
    if isinstance(err, UnicodeDecodeError):
        return f"malformed JSON: not valid UTF-8 (byte {err.object[err.start:err.start + 1]!r} at {err.start})"
    if isinstance(err, RecursionError):
        return "malformed JSON: nested too deep"
    text = str(err)
    whole = whole_payload_words(text, data)
    if whole:
        return whole
    if isinstance(err, msgspec.ValidationError):
        return in_words(text)
    return f"malformed JSON: {text}"


def decode_claim(data: bytes) -> ClaimSpec:
    """A ClaimSpec from JSON, in either spelling (ours, or the serverless seed's camelCase with
    `claimId`, schemas/seed.py); an integer may be written as 2.0, as JSON Schema's `integer`
    allows (some encoders write every number that way), so the schema and the intake agree. A key
    written twice in one object is refused (schemas/strict_json.py)."""
    if b'"claimId"' in data:  # cheap test first: the canonical spelling never pays the second decode
        raw = msgspec.json.decode(data)
        if is_seed_claim(raw):
            check_no_duplicate_keys(data, raw)
            return from_seed_claim(convert_seed(raw, SeedClaimSpec), raw)
    try:  # typed first: its errors name the field (`$.gpus`), an untyped decode's do not
        spec = _spec_decoder.decode(data)
    except msgspec.ValidationError as err:
        if "Expected `int`, got `float`" not in str(err):
            raise
        spec = msgspec.convert(_integral_floats_as_ints(msgspec.json.decode(data)), ClaimSpec)
    check_no_duplicate_keys(data)
    return spec


def _integral_floats_as_ints(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value


def _batch_id(claim_ids: list[str]) -> str:
    """The same drained batch appended again (an infrastructure retry) is stored once."""
    return "intake-" + hashlib.sha256("\n".join(claim_ids).encode()).hexdigest()[:32]


async def _reject(service, claim_id: str, code: str, message: str, field: str, data: bytes,
                  specs: dict[str, ClaimSpec], seq: int = 0, system: str = "",
                  owners: dict[str, str] | None = None) -> None:
    """A refusal on the claim's subject, so its sender can look it up, unless that id is already
    a claim: a different claim (or a malformed payload) reusing the id must never touch it. Where
    that claim is another submitter's, its outcome is on another subject than the sender's: the
    refusal is written on the sender's own (`_outcome_of_refusal`), whatever was refused."""
    elsewhere = _held_by_another(service, claim_id, specs, owners, system)
    event = await _dead_letter(service, claim_id, code, message, field, data, seq, system, elsewhere)
    if claim_id and not _known(service, claim_id, specs):
        await _refuse_on_subject(service, claim_id, event, specs)


async def _refuse_on_subject(service, claim_id: str, event: ev.ClaimRejected, specs: dict[str, ClaimSpec]) -> None:
    """The refusal on the claim's subject only where no claim has this id, checked by nats-server:
    appended on condition that no claim came on the submit subject since the last this service's
    checks saw (`intake_fence.py`); one that came (another replica's, a moment ago, not yet folded
    here) is folded and the id checked again. On a pending claim's subject the fold ends the claim
    on its refusal (session 31). The caller holds the fence's lock."""
    fence = _fence(service)
    subject = subjects.claim(claim_id)
    for _ in range(5):
        expected = fence.tip
        if _known(service, claim_id, specs):
            break
        try:
            await fence.append_elsewhere(subject, event, expected, msg_id=f"rejected-{claim_id}")
            return
        except AppendConflict as conflict:
            await fence.caught_up(conflict)
    log.debug("intake refusal of %r kept as a dead letter only: the id is a claim's", claim_id)


def _known(service, claim_id: str, specs: dict[str, ClaimSpec]) -> bool:
    """The id, or its subject (`col_a` is `col.a`'s), already belongs to a claim."""
    state = service.state
    return (claim_id in state.claims or claim_id in state.ended or claim_id in specs
            or claim_id in _in_flight(service) or bool(service.shares_subject(claim_id, specs)))


async def _dead_letter(service, claim_id: str, code: str, message: str, field: str, data: bytes,
                       seq: int = 0, system: str = "", held_by_another: bool = False) -> ev.ClaimRejected:
    """Every refusal once on the dead-letter subject: keyed on the intake message's sequence, so
    a redelivery (the service died before its ack) is stored once."""
    # bounded: a refusal quoting a value near the max payload could not be stored (wording.py)
    message, field = bounded(message), bounded_field(field)
    detail = {"field": field, "payload": data[:1024].decode("utf-8", "replace")}
    if system:  # which publishing system sent it (for operators reading the dead letters)
        detail["system"] = system
    event = ev.ClaimRejected(claim_id=claim_id, code=code,
                             reasons=[Reason(code, message, detail=detail)], at=service.clock())
    # debug, not info: one line per refused message is a line per message of a flood of bad ones
    # (the refusal itself is stored, on the dead-letter subject and the claim's own)
    log.debug("intake rejected claim %r: %s", claim_id, message)
    stored = await service.log.append(subjects.DEAD_LETTER + ".intake", event,
                                      msg_id=f"dead-intake-{seq}" if seq else None)
    if held_by_another:
        await _outcome_of_refusal(service, event, stored.seq)
    return event


async def _outcome_of_refusal(service, event: ev.ClaimRejected, seq: int) -> None:
    """The refusal as the sender's outcome (`rejected`, final, nothing of the other claim) on its own
    outcome subject, which holds nothing else: the outcome writer writes the outcomes of what the
    fold holds, and a dead letter is never folded. Session 33: a system publishing an id another
    system held waited for ever, its subject empty. Written before the intake message is acked:
    should it fail, the message comes again (its dead letter is stored once, by its msg id) and this
    is written then; built from the log's record alone, so a second writing is the same message."""
    nc = getattr(service.log, "nc", None)
    if nc is None:  # an in-memory log (tests): no outcome stream
        return
    outcome = rejected_outcome(event, seq)
    await nc.jetstream().publish(subjects.outcome(event.claim_id, outcome.system), encode_outcome(outcome),
                                 stream=subjects.OUTCOMES_STREAM)


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
TRACESTATE_MAX = 512  # W3C trace context: a tracestate longer than this may be dropped


def trace_of(headers: dict[str, str]) -> dict[str, str]:
    """The W3C trace context a publisher sent, kept in its claim's ClaimSubmitted (intake, decision
    and binding are one trace): a well-formed `traceparent` only (55 characters), with its
    `tracestate` when that is at most 512. Anything else is dropped, not refused: the headers are
    the publisher's, and the log keeps what it is given for ever (a 60 KB `traceparent` was stored
    as it came, in every claim that carried one)."""
    parent = headers.get("traceparent", "")
    if not _TRACEPARENT.fullmatch(parent):
        return {}
    state = headers.get("tracestate", "")
    return {"traceparent": parent} | ({"tracestate": state} if 0 < len(state) <= TRACESTATE_MAX else {})


def _readable_id(data: bytes, headers: dict[str, str]) -> str:
    """The claim id if the payload has a valid one (so the sender can look its refusal up); for a
    payload with no id at all, its `Nats-Msg-Id` header if that is a valid claim id. Never an id
    against the rule: it becomes a subject token (`gpu.evt.claim.<id>`, the outcome's), and one of
    5,000 characters is past nats-server's control line, which cuts the claim service off."""
    try:
        raw = msgspec.json.decode(data)
    except Exception:  # not JSON, not UTF-8, nested too deep: no id to read
        raw = None
    claim_id = raw.get("claim_id", raw.get("claimId")) if isinstance(raw, dict) else None
    if isinstance(claim_id, str):
        return _valid_id(claim_id)
    return _valid_id(headers.get("Nats-Msg-Id", "")) if headers else ""


def _valid_id(claim_id: str) -> str:
    """`claim_id` if it keeps the claim id rule (schemas.types), else ""."""
    if not claim_id:
        return ""
    try:
        msgspec.convert({"claim_id": claim_id, "namespace": "x"}, ClaimSpec)
        return claim_id
    except msgspec.ValidationError:
        return ""
