"""Stored events stay foldable when the contract tightens.

The log is immutable. When a bound is added to a field (`ge`/`le`, a pattern, a length, an enum:
`Literal`), an event stored before it may no longer decode with the strict types: the fold would
skip it, and a replay would differ from the fold that first read it. Folds of stored events
(`ledger.admission`) therefore fall back, on a `msgspec.ValidationError`, to `decode_lenient`: the
same event types with every constraint stripped (types, tags, defaults and nesting unchanged;
unknown fields ignored), built once from the strict types' own fields, and the result rebuilt as
the strict types (a Struct's constructor does not check constraints), so every fold handles it as
it always did. The intake never uses this: what comes in now is held to the strict contract.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal, Union

import msgspec

from schemas import events as ev
from schemas import upcast as upcasts
from schemas.types import ClaimSpec

_lenient_of: dict[type, type] = {}  # strict Struct -> its lenient twin
_strict_of: dict[type, type] = {}  # and back


def _loose(tp: Any) -> Any:
    """The annotation `tp` without constraints."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _loose(typing.get_args(tp)[0])
    if origin is Literal:
        kinds = {type(v) for v in typing.get_args(tp)}
        return kinds.pop() if len(kinds) == 1 else Any
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _lenient_struct(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # the fold's state, in a snapshot
        return _lenient_dataclass(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_loose(a) for a in typing.get_args(tp))]
    if origin in (list, dict, tuple, set, frozenset):
        args = typing.get_args(tp)
        return origin[tuple(_loose(a) if a is not Ellipsis else a for a in args)] if args else origin
    return tp


def _lenient_struct(strict: type) -> type:
    found = _lenient_of.get(strict)
    if found is not None:
        return found
    config, fields = strict.__struct_config__, []
    for f in msgspec.structs.fields(strict):  # nested Structs get their twins first
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, _loose(f.type), f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, _loose(f.type), msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, _loose(f.type)))
    lenient = msgspec.defstruct(
        "Lenient" + strict.__name__, fields, kw_only=True, frozen=config.frozen,
        omit_defaults=config.omit_defaults, tag=config.tag, tag_field=config.tag_field, gc=config.gc,
        rename={f.name: f.encode_name for f in msgspec.structs.fields(strict) if f.name != f.encode_name} or None)
    _lenient_of[strict], _strict_of[lenient] = lenient, strict
    return lenient


def _lenient_dataclass(strict: type) -> type:
    found = _lenient_of.get(strict)
    if found is not None:
        return found
    hints, fields = typing.get_type_hints(strict, include_extras=True), []
    for f in dataclasses.fields(strict):
        if f.default is not dataclasses.MISSING:
            fields.append((f.name, _loose(hints[f.name]), f.default))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, _loose(hints[f.name]), msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, _loose(hints[f.name])))
    lenient = msgspec.defstruct("Lenient" + strict.__name__, fields, kw_only=True)
    _lenient_of[strict], _strict_of[lenient] = lenient, strict
    return lenient


_decoder: msgspec.json.Decoder | None = None
_union: Any = None


def decode_lenient(data: bytes) -> ev.Event:
    """A stored event, decoded without the contract's constraints; raises like `decode_event` for
    anything that is not one of the event types at all."""
    global _decoder, _union
    if _decoder is None:  # built on first use: most processes never need it
        _union = Union[tuple(_lenient_struct(m) for m in typing.get_args(ev.AnyEvent))]
        _decoder = msgspec.json.Decoder(_union)
    if upcasts.EVENT_KINDS:  # older versions upgraded first, as `decode_event` does
        return _to_strict(msgspec.convert(ev._upcast_raw(msgspec.json.decode(data)), _union))
    return _to_strict(_decoder.decode(data))


def convert_lenient(raw: Any, strict: type) -> Any:
    """`raw` (decoded builtins: a stored snapshot's msgpack) as the Struct type `strict`, read
    without the contract's constraints, like a stored event."""
    return _to_strict(msgspec.convert(raw, _lenient_struct(strict)))


def _to_strict(value: Any) -> Any:
    strict = _strict_of.get(type(value))
    if strict is not None and dataclasses.is_dataclass(strict):  # as msgspec builds one: no __init__
        out = strict.__new__(strict)
        for name in value.__struct_fields__:
            object.__setattr__(out, name, _to_strict(getattr(value, name)))
        if hasattr(out, "__post_init__"):
            out.__post_init__()
        return out
    if strict is not None:
        return strict(**{name: _to_strict(getattr(value, name)) for name in value.__struct_fields__})
    if isinstance(value, list):
        return [_to_strict(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_strict(v) for k, v in value.items()}
    return value


UNCHECKED_SUBMITS = "UncheckedSubmits"  # the tag of `unchecked_submits()`: no stored event's type


def unchecked_submits() -> type:
    """Submits read without the contract's constraints, as one batch under a tag of their own: for
    a reader that checked each against the strict types already (the read-ahead helper,
    `shared.readahead`) and hands them to a fold that keeps none of them (their claims end later in
    the range it folds). A ClaimSpec's pattern checks are half the cost of decoding it. No writer
    stores this type and no strict decoder reads it: a stored payload that names it is undecodable."""
    global _unchecked
    if _unchecked is None:
        _unchecked = msgspec.defstruct(
            UNCHECKED_SUBMITS, [("events", list[_unchecked_submitted()]), ("v", int, 1), ("at", float, 0.0)],
            kw_only=True, frozen=True, omit_defaults=True, gc=False, tag_field="type", tag=UNCHECKED_SUBMITS)
    return _unchecked


_unchecked: type | None = None


class _NoItems(dict):
    """An empty dict nobody may fill: one shared in place of each absent dict of unchecked submits
    (`_unchecked_submitted`). A dict still (encoded, compared and read as one), its changes refused."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a shared empty dict of unchecked submits: read-only")

    __setitem__ = __delitem__ = __ior__ = setdefault = update = pop = popitem = clear = _refuse


NO_ITEMS = _NoItems()


def _unchecked_submitted() -> type:
    """`ClaimSubmitted`'s lenient twin where every list or dict left out (most claims leave out
    three or four: groups, CUDA versions, node selector, labels; every submit its trace) is one
    shared empty tuple or read-only dict (`NO_ITEMS`) instead of a new empty one: such a claim
    ends within the catch-up that reads it, whose folds never change an event or a spec (both
    frozen, their lists and dicts only read). Five objects fewer to make and free for each of the
    ~170,000 claims of a 1M-event replay that end in it."""
    spec = _shared_empties(_lenient_struct(ClaimSpec), "UncheckedClaimSpec", {})
    return _shared_empties(_lenient_struct(ev.ClaimSubmitted), "UncheckedClaimSubmitted", {"claim": spec})


def submitted_of(member: Any) -> ev.ClaimSubmitted:
    """A member of unchecked submits as the `ClaimSubmitted` it stands for (the strict types, with
    lists and dicts of its own, unchecked: a Struct's constructor checks no constraints), for a fold
    that keeps its claim after all (one that keeps ended claims)."""
    def own(value: Any) -> Any:
        return list(value) if type(value) is tuple else dict(value) if type(value) is _NoItems else value

    spec = member.claim
    claim = ClaimSpec(**{name: own(getattr(spec, name)) for name in spec.__struct_fields__})
    return ev.ClaimSubmitted(**{name: claim if name == "claim" else own(getattr(member, name))
                                for name in member.__struct_fields__})


def _shared_empties(twin: type, name: str, types_of: dict[str, type]) -> type:
    """`twin` under `name`, its fields' empty list and dict defaults shared (`_unchecked_submitted`),
    and the fields named in `types_of` of those types."""
    fields = []
    for f in msgspec.structs.fields(twin):
        kind = types_of.get(f.name, f.type)
        if f.default_factory is list:
            fields.append((f.name, kind, ()))
        elif f.default_factory is dict:
            fields.append((f.name, kind, NO_ITEMS))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        elif f.default is not msgspec.NODEFAULT:
            fields.append((f.name, kind, f.default))
        else:
            fields.append((f.name, kind))
    config = twin.__struct_config__
    return msgspec.defstruct(name, fields, kw_only=True, frozen=config.frozen,
                             omit_defaults=config.omit_defaults, tag=config.tag, tag_field=config.tag_field, gc=config.gc,
                             rename={f.name: f.encode_name for f in msgspec.structs.fields(twin)
                                     if f.name != f.encode_name} or None)


def lenient_twin(strict: type) -> type:
    """The Struct type `strict` without the contract's constraints (the twin `decode_lenient` reads)."""
    return _lenient_struct(strict)
