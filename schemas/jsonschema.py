"""JSON Schema draft 2020-12 from the msgspec Structs, in a form every common validator compiles.

msgspec's own output is close, but it writes OpenAPI's `discriminator` for tagged unions (ajv's
strict mode refuses the keyword), leaves out `additionalProperties: false` where a Struct forbids
unknown fields, and declares no `$schema`. `to_2020_12` rewrites one document:

- a tagged union becomes `type` required with an enum of the tags, and one `if type == X then
  $ref X` per member (only the matching member reports errors);
- a one-value `enum` becomes `const`;
- a Struct that forbids unknown fields gets `additionalProperties: false`;
- the document gets `$schema`, `$id` and a title.

Rules that span fields (a claim's one shape, ...) are added by `schemas.claim_rules`.
"""

from __future__ import annotations

from typing import Any

import msgspec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "urn:gpuledger:schema:"  # a name, not a location: the files travel with the repository
TAG = "type"


def schema_of(types: Any, file_name: str, title: str, closed: dict[str, bool]) -> dict:
    """The 2020-12 document for `types` (a Struct or a union of Structs); `closed` names the
    Structs that refuse unknown fields (see `closed_structs`)."""
    raw = msgspec.json.schema(types)
    doc = {"$schema": DIALECT, "$id": ID_BASE + file_name.removesuffix(".json"), "title": title}
    doc.update(_rewrite(raw, closed))
    return doc


def closed_structs(*roots: type) -> dict[str, bool]:
    """Struct name -> forbids unknown fields, for every Struct reachable from `roots`."""
    found: dict[str, bool] = {}
    stack = list(roots)
    while stack:
        struct = stack.pop()
        if struct.__name__ in found:
            continue
        found[struct.__name__] = bool(struct.__struct_config__.forbid_unknown_fields)
        for field in msgspec.structs.fields(struct):
            stack.extend(_structs_in(field.type))
    return found


def _structs_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return [annotation]
    out = []
    for arg in getattr(annotation, "__args__", ()) or ():
        out.extend(_structs_in(arg))
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and isinstance(origin, type) and issubclass(origin, msgspec.Struct):
        out.append(origin)
    return out


def _rewrite(node: Any, closed: dict[str, bool]) -> Any:
    if isinstance(node, list):
        return [_rewrite(item, closed) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewrite(value, closed) for key, value in node.items()
           if key not in ("discriminator", "anyOf") or "discriminator" not in node}
    if "discriminator" in node:
        out.update(_tagged_union(node))
    if isinstance(out.get("enum"), list) and len(out["enum"]) == 1:
        out["const"] = out.pop("enum")[0]
    if out.get("type") == "object" and "properties" in out and closed.get(out.get("title", "")):
        out["additionalProperties"] = False
    return out


def _tagged_union(node: dict) -> dict:
    """`anyOf` + `discriminator` -> an enum of tags and one `if tag then $ref` per member."""
    field = node["discriminator"]["propertyName"]
    mapping = node["discriminator"]["mapping"]
    members = [{"if": {"properties": {field: {"const": tag}}},
                "then": {"$ref": ref}} for tag, ref in mapping.items()]
    return {"type": "object", "required": [field],
            "properties": {field: {"enum": list(mapping)}}, "allOf": members}
