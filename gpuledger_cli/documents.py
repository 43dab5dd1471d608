"""Manifest files as the CLI reads them (`quota apply -f`, `pool create|apply|update -f`,
`endpoint create|update -f`): YAML (several documents allowed) or JSON, '-' for standard input.

What a hostile or broken file gets is one line naming the file and the problem, never a traceback:
bytes that are not UTF-8 (with the offset), nesting deeper than any manifest needs, and a key
written twice in one mapping, which YAML and JSON parsers resolve differently (PyYAML and Python's
json keep the last, others the first or refuse), so `{mode: Card, mode: MIG}` is refused as the
intake refuses `{"gpus": 1, "gpus": 64}` (docs/contract.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml

from gpuledger_cli.client import die

class DocumentError(ValueError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key written twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base`: its keys may be overridden, that is what it is for
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the base class says so in its own words
                break
            if repeated:
                mark = key_node.start_mark
                raise DocumentError(f"duplicate key {key!r} (line {mark.line + 1}, column {mark.column + 1}; "
                                    f"first at line {seen[key] + 1}): each key may appear only once in a "
                                    "mapping (parsers differ on which one counts)")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def read_text(path: str | Path) -> str:
    """The file's text ('-': standard input); unreadable or non-UTF-8 input ends the CLI."""
    try:
        if str(path) == "-":
            data = typer.get_binary_stream("stdin").read()
        else:
            data = Path(path).read_bytes()
    except OSError as err:
        die(f"cannot read {path}: {err.strerror}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        die(f"{path}: not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start} ({err.reason})")


def load_documents(path: str | Path) -> list:
    """Every document of the file (JSON is one document); errors end the CLI naming the file."""
    text = read_text(path)
    try:
        return _parse(text)
    except DocumentError as err:
        die(f"{path}: {err}")
    except RecursionError:  # PyYAML and json recurse once per level: a manifest needs a few
        die(f"{path}: nested too deeply (a manifest is a few levels deep)")
    except yaml.YAMLError as err:
        die(f"{path}: not valid YAML or JSON: {err}")


def load_document(path: str | Path) -> object:
    """The file's one document (YAML or JSON)."""
    documents = [doc for doc in load_documents(path) if doc is not None]
    if len(documents) > 1:
        die(f"{path}: holds {len(documents)} documents; give one")
    return documents[0] if documents else None


# Far more values than any manifest has (a quota or a pool is a few dozen), far fewer than a YAML
# "billion laughs" expands to: nine aliases of nine aliases ... of a list are 9**9 values in a
# few hundred bytes, shared while loaded, copied out by whatever walks them (a conversion, the JSON
# sent to a service), which then ran for minutes and took every byte of memory (session 29).
MAX_VALUES = 100_000


def _parse(text: str) -> list:
    try:
        return [json.loads(text, object_pairs_hook=_unique_pairs)]
    except DocumentError:
        raise
    except ValueError:
        pass  # not JSON: YAML (of which JSON is a part) says what is wrong
    documents = list(yaml.load_all(text, Loader=_StrictLoader))
    _refuse_expansion(documents)
    return documents


def _refuse_expansion(documents: list) -> None:
    """Count the values as a reader walking the documents meets them (an alias's target once per
    alias), stopping at MAX_VALUES."""
    todo, seen = [documents], 0
    while todo:
        value = todo.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise DocumentError(f"holds more than {MAX_VALUES:,} values once its aliases are expanded "
                                "(*name repeats what &name marks): a manifest needs a few dozen")
        if isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise DocumentError(f"duplicate key {key!r}: each key may appear only once in a JSON "
                                "object (parsers differ on which one counts)")
        seen[key] = value
    return seen
