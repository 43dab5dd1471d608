"""Refusals in words another team can act on: msgspec says "Expected `str` matching regex
'^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?(?!\\n)$'", which names the field but not the rule. Each
pattern of the contract has a description (the same one the JSON Schema carries); a refusal quoting
a pattern gets it in front. Pure: no I/O."""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, get_args, get_origin

import msgspec

_QUOTED = re.compile(r"Expected `str` matching regex (?P<pattern>'.*?'|\".*?\")(?= - at |$)")


@cache
def _pattern_words() -> dict[str, str]:
    """repr(pattern) -> description, for every described pattern of the claim and the seed."""
    from schemas import seed, types

    out = {}
    for module in (types, seed):
        for value in vars(module).values():
            if get_origin(value) is not Annotated:
                continue
            for meta in get_args(value)[1:]:
                if isinstance(meta, msgspec.Meta) and meta.pattern and meta.description:
                    out[repr(meta.pattern)] = meta.description
    return out


def in_words(message: str) -> str:
    """`message` with the rule of a quoted pattern said in words (unchanged when none is known)."""
    match = _QUOTED.search(message)
    words = _pattern_words().get(match.group("pattern")) if match else None
    if not words:
        return message
    return f"{message[:match.start()]}Expected {words} (`str` matching regex {match.group('pattern')})" \
           f"{message[match.end():]}"


# a high surrogate escape with no low one after it (JSON may not hold half a character)
_LONE_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")


def whole_payload_words(message: str, data: bytes) -> str | None:
    """Plain words for what msgspec says of a payload as a whole (None: not such a message)."""
    if data.startswith(b"\xef\xbb\xbf") and message.endswith("invalid character (byte 0)"):
        # what .NET's Encoding.UTF8 and PowerShell's `-Encoding utf8` write first (session 32)
        return ("malformed JSON: the payload starts with a UTF-8 byte-order mark (bytes EF BB BF): "
                "send the JSON without one")
    if message.startswith("Expected `object`, got `") and " - at " not in message:
        return f"the payload must be one JSON object; it is {message.split('got ', 1)[1]}"
    if message == "Input data was truncated":  # msgspec's words for an empty or cut-off payload
        if not data.strip():
            return "malformed JSON: the payload is empty"
        lone = _LONE_HIGH_SURROGATE.search(data)  # msgspec says "truncated" of `"\ud800"` too
        if lone:
            return (f"malformed JSON: a lone UTF-16 surrogate (`{lone.group().decode()}`, byte {lone.start()}) "
                    "in a string: it must be followed by a low one (\\udc00-\\udfff) to make a character")
        return "malformed JSON: the payload ends before its JSON value does (cut off?)"
    return None


# What a refusal may quote of what it was sent. Error words echo the value they refuse (msgspec's
# "unknown field `k...`", "Invalid enum value 'H...'", a service's "no claim 'a...'"), and a value
# may be nearly as long as a whole NATS message: an answer quoting a 1 MB claim id was past the
# max payload, so the request was never answered (the asker timed out, told nothing), and an
# intake refusal quoting a 1 MB key could not be stored, so the claim had no outcome at all
# (session 32). Every legitimate message and field is far shorter than these.
MESSAGE_MAX = 2048
FIELD_MAX = 300
_KEEP_TAIL = 200  # the end of a message says where (" - at `$.models[0]`"): kept


def bounded(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text`, or its start and end around a note of how much was cut, within about `limit`
    characters."""
    if len(text) <= limit:
        return text
    tail = min(_KEEP_TAIL, limit // 4)
    return f"{text[:limit - tail - 60]}... [{len(text) - limit + 60:,} of {len(text):,} characters cut] ...{text[-tail:]}"


def bounded_field(field: str) -> str:
    return bounded(field, FIELD_MAX)
