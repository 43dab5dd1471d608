"""The serverless seed's spelling on the request/reply subjects (schemas/seed.py).

`gpu.cmd.endpoint.create` and `gpu.cmd.claim.submit` take the endpoint (or claim) in either
spelling; the decoders here turn a seed-spelled one into the canonical command and mark it, so
the handler answers in the names the client wrote (errors name `gpus[0]`, not `gpu_groups[0]`,
and the endpoint comes back in the seed's shape as well)."""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.commands import CreateEndpoint, SubmitClaim, UpdateEndpoint
from shared.commands import DomainError
from schemas.seed import (SeedClaimSpec, SeedEndpointSpec, _integral, convert_seed, from_seed_claim,
                          from_seed_endpoint, is_seed_claim, is_seed_endpoint, seed_field)


class SeedCreateEndpoint(CreateEndpoint):
    """A CreateEndpoint whose endpoint was written in the seed's spelling."""


class SeedUpdateEndpoint(UpdateEndpoint):
    """An UpdateEndpoint whose endpoint was written in the seed's spelling."""


class SeedSubmitClaim(SubmitClaim):
    """A SubmitClaim whose claim was written in the seed's spelling."""


_create = msgspec.json.Decoder(CreateEndpoint)
_update = msgspec.json.Decoder(UpdateEndpoint)
_submit = msgspec.json.Decoder(SubmitClaim)


def _split(body: bytes, key: str, is_seed) -> tuple[dict, Any] | None:
    """(the command without `key`, the seed-spelled object) when `key` holds one; else None."""
    raw = msgspec.json.decode(body)
    if not isinstance(raw, dict) or not is_seed(raw.get(key)):
        return None
    rest = {k: v for k, v in raw.items() if k != key}
    return rest, raw[key]


def decode_create_endpoint(body: bytes) -> CreateEndpoint:
    return _endpoint_command(body, _create, SeedCreateEndpoint)


def decode_update_endpoint(body: bytes) -> UpdateEndpoint:
    return _endpoint_command(body, _update, SeedUpdateEndpoint)


def _endpoint_command(body: bytes, decoder, seed_type):
    split = _split(body, "endpoint", is_seed_endpoint)
    if split is None:
        return decoder.decode(body)
    rest, seed = split
    msgspec.convert(rest, _Empty)  # nothing else may ride along (unknown fields are refused)
    return seed_type(endpoint=from_seed_endpoint(convert_seed(seed, SeedEndpointSpec, "endpoint"), seed))


def decode_submit_claim(body: bytes) -> SubmitClaim:
    split = _split(body, "claim", is_seed_claim)
    if split is None:
        try:
            return _submit.decode(body)
        except msgspec.ValidationError as err:  # an integer written 2.0: JSON Schema's `integer`
            if "Expected `int`, got `float`" not in str(err):  # allows it, and so does the intake
                raise
        return msgspec.convert(_integral(msgspec.json.decode(body)), SubmitClaim)
    rest, seed = split
    wait = msgspec.convert(rest, _Wait)
    return SeedSubmitClaim(claim=from_seed_claim(convert_seed(seed, SeedClaimSpec, "claim"), seed),
                           wait_seconds=wait.wait_seconds)


class _Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class _Wait(msgspec.Struct, forbid_unknown_fields=True):
    wait_seconds: float = 0.0


def in_seed_names(err: DomainError, wire: dict[str, str], prefix: str) -> DomainError:
    """The same error with its field (`claim.gpu_groups[0]`) in the seed's names (`claim.gpus[0]`)."""
    if not err.field.startswith(prefix + "."):
        return err
    return DomainError(err.code, err.message, f"{prefix}.{seed_field(err.field.removeprefix(prefix + '.'), wire)}")
