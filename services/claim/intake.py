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

import msgspec
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from schemas import events as ev
from schemas import subjects
from schemas.seed import CLAIM_WIRE, SeedClaimSpec, convert_seed, from_seed_claim, is_seed_claim, seed_field
from schemas.types import ClaimSpec, Reason
from shared.commands import DomainError, field_of
from shared.telemetry import tracer

log = logging.getLogger("gpuledger.claim")
DURABLE = "claim-intake"
_spec_decoder = msgspec.json.Decoder(ClaimSpec)


async def consume_intake(js, service, batch: int = 256) -> None:
    sub = await js.pull_subscribe(subjects.INTAKE_CLAIMS, durable=DURABLE, stream=subjects.INTAKE_STREAM,
                                  config=api.ConsumerConfig(ack_wait=30, max_deliver=-1))
    try:
        while True:
            try:
                msgs = await sub.fetch(batch, timeout=1.0)
            except (NatsTimeout, asyncio.TimeoutError):
                continue
            if service.on_intake_batch is not None:
                service.on_intake_batch(len(msgs))
            await handle_intake_batch(service, [(m.data, dict(m.headers or {})) for m in msgs])
            for msg in msgs:
                await msg.ack()
    finally:
        # an open fetch inbox would make the connection's drain wait its full timeout on stop
        try:
            await sub.unsubscribe()
        except Exception:
            pass


async def wait_intake_drained(js, timeout: float = 5.0) -> None:
    """Until every intake message published before this call is handled: the stream is a work
    queue, so a message is gone once acked, and it is acked only after its outcome is folded."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    state = (await js.stream_info(subjects.INTAKE_STREAM)).state
    target = state.last_seq
    while state.messages and state.first_seq <= target and loop.time() < deadline:
        await asyncio.sleep(0.01)
        state = (await js.stream_info(subjects.INTAKE_STREAM)).state


async def handle_intake_batch(service, messages: list[tuple[bytes, dict[str, str]]]) -> None:
    """Everything one fetch drained: each message validated on its own (a refusal is recorded per
    claim), the new claims appended together, as one EventBatch when there are several (one
    message to write and to read back instead of one per claim). A claim repeated within the
    batch is kept once; one already in the log is not appended again."""
    accepted: dict[str, ev.ClaimSubmitted] = {}
    specs: dict[str, ClaimSpec] = {}
    with tracer().start_as_current_span("claim.intake") as span:  # one span per drained batch
        span.set_attribute("gpuledger.messages", len(messages))
        for data, headers in messages:
            event = await _accept(service, data, headers, specs)
            if event is not None:
                accepted[event.claim.claim_id], specs[event.claim.claim_id] = event, event.claim
    if len(accepted) == 1:
        (event,) = accepted.values()
        appended = await service.log.append(subjects.claim(event.claim.claim_id), event,
                                            msg_id=event.claim.claim_id)
    elif accepted:
        ids = list(accepted)
        appended = await service.log.append(subjects.INTAKE_BATCHES, ev.EventBatch(
            events=list(accepted.values()), at=service.clock()), msg_id=_batch_id(ids))
    else:
        return
    await service.follower.wait_for_seq(appended.seq)


async def _accept(service, data: bytes, headers: dict[str, str],
                  specs: dict[str, ClaimSpec]) -> ev.ClaimSubmitted | None:
    # no span per claim (they cost a third of this service): the batch has one, and a publisher's
    # own trace context travels on in the claim's `trace`
    try:
        spec = decode_claim(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        field = field_of(err)
        await _reject(service, _readable_id(data, headers), "invalid", str(err), field, data)
        return None
    trace = {k: v for k, v in headers.items() if k in ("traceparent", "tracestate")}
    try:
        return service.prepare(spec, trace or None, pending=specs)
    except DomainError as err:
        field = err.field
        if _seed_spelled(data):  # answered in the names the publisher wrote
            field = "claim." + seed_field(field.removeprefix("claim."), CLAIM_WIRE) if field else field
        await _reject(service, spec.claim_id, err.code, err.message, field, data)
        return None


def _seed_spelled(data: bytes) -> bool:
    return b'"claimId"' in data and is_seed_claim(msgspec.json.decode(data))


def decode_claim(data: bytes) -> ClaimSpec:
    """A ClaimSpec from JSON, in either spelling (ours, or the serverless seed's camelCase with
    `claimId`, schemas/seed.py); an integer may be written as 2.0, as JSON Schema's `integer`
    allows (some encoders write every number that way), so the schema and the intake agree."""
    if b'"claimId"' in data:  # cheap test first: the canonical spelling never pays the second decode
        raw = msgspec.json.decode(data)
        if is_seed_claim(raw):
            return from_seed_claim(convert_seed(raw, SeedClaimSpec), raw)
    try:
        return _spec_decoder.decode(data)
    except msgspec.ValidationError as err:
        if "Expected `int`, got `float`" not in str(err):
            raise
    return msgspec.convert(_integral_floats_as_ints(msgspec.json.decode(data)), ClaimSpec)


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


async def _reject(service, claim_id: str, code: str, message: str, field: str, data: bytes) -> None:
    detail = {"field": field, "payload": data[:1024].decode("utf-8", "replace")}
    event = ev.ClaimRejected(claim_id=claim_id, code=code,
                             reasons=[Reason(code, message, detail=detail)], at=service.clock())
    log.info("intake rejected claim %r: %s", claim_id, message)
    if claim_id:
        await service.log.append(subjects.claim(claim_id), event, msg_id=f"rejected-{claim_id}")
    await service.log.append(subjects.DEAD_LETTER + ".intake", event)


def _readable_id(data: bytes, headers: dict[str, str]) -> str:
    """The claim id if the payload has a valid one (so the sender can look its refusal up)."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raw = None
    claim_id = raw.get("claim_id", raw.get("claimId")) if isinstance(raw, dict) else None
    if isinstance(claim_id, str):
        try:
            msgspec.convert({"claim_id": claim_id, "namespace": "x"}, ClaimSpec)
            return claim_id
        except msgspec.ValidationError:
            return ""
    return headers.get("Nats-Msg-Id", "") if headers else ""
