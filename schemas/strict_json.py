"""Duplicate keys in a JSON object are refused on the intake and on every request subject.

RFC 8259 leaves a repeated key's meaning to the parser (msgspec, Python's json and JavaScript's
JSON.parse keep the last one, others the first or refuse), so `{"gpus": 1, "gpus": 64}` could mean
two different claims to two readers of the same bytes. No JSON Schema keyword can see a repeated
key (the validator gets the parsed object), so this is the one rule outside `schemas/json/`.

Cheap on the common path: a payload without duplicates is proven so by counting. Outside strings a
`:` only ends a key, so the bytes hold one `:` per key written plus those inside strings; the
parsed value written back (msgspec, in C) holds one per member kept plus the same ones inside its
strings. When the bytes hold no more `:` than that, no key was written twice. Only a payload
that fails that count (a repeated key, or a `\\u` escape that hides a `:`) is parsed a second time
to find the repeated key's path. Pure: no I/O.
"""

from __future__ import annotations

import json

import msgspec

_encode = msgspec.json.Encoder().encode


class DuplicateKeyError(msgspec.ValidationError):
    """A key written twice in one object; `field` is the path of the repeated key."""

    def __init__(self, key: str, where: str):
        self.field = f"{where}.{key}" if where else key
        place = f"`$.{where}`" if where else "the top-level object"
        super().__init__(f"duplicate key `{key}` in {place}: each key may appear only once in a "
                         f"JSON object (parsers differ on which one counts)")


def check_no_duplicate_keys(data: bytes, parsed: object = msgspec.UNSET) -> None:
    """Raise DuplicateKeyError naming the first repeated key of `data` (valid JSON, already
    accepted by a parser; `parsed` is its value when the caller has it)."""
    if parsed is msgspec.UNSET:
        parsed = msgspec.json.decode(data)
    # the parsed value written back holds one `:` per member and each `:` of its strings
    if data.count(b":") <= _encode(parsed).count(b":") and b"\\u" not in data:
        return
    repeated = _first_repeat(json.loads(data, object_pairs_hook=_Pairs), "")
    if repeated:
        raise DuplicateKeyError(*repeated)


class _Pairs(list):
    """An object as Python's json parser read it: its (key, value) pairs in order, repeats kept."""


def _first_repeat(value, where: str) -> tuple[str, str] | None:
    """(key, path of its object) of the first key written twice, depth first, in document order."""
    if isinstance(value, _Pairs):
        seen = set()
        for key, item in value:
            if key in seen:
                return key, where
            seen.add(key)
            found = _first_repeat(item, f"{where}.{key}" if where else key)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _first_repeat(item, f"{where}[{i}]")
            if found:
                return found
    return None
