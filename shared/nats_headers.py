"""nats-py's header parser, the same answers at about half the CPU.

Every message with headers is parsed by `Client._parse_header_lines` before anything else looks at
it: each ledger message every follower folds (`Nats-Msg-Id`, `Nats-Expected-Stream`), each intake
claim (its publisher's `Nats-Msg-Id`), each node record. nats-py 2.x tests each header name for
whitespace a character at a time through a generator (`any(c.isspace() for c in key)`): 8.3 against
3.9 us for a ledger message's headers here (`timeit`, load 6). `install` puts this parser in its
place; it keeps nats-py's rules exactly (tests/speed_nats/test_nats_headers.py compares the two):
lines split on CRLF, a line without `:` skipped, the name stripped of ASCII whitespace and skipped
when it holds whitespace (what `str.isspace` calls whitespace: also \\x1c-\\x1f) or a non-ASCII byte,
the value stripped and decoded as UTF-8 with replacement, a later header of the same name winning.
"""

from __future__ import annotations

import re

from nats.aio.client import Client

_WHITESPACE = re.compile(rb"[\s\x1c-\x1f]").search  # str.isspace's ASCII characters
_ORIGINAL = getattr(Client, "_parse_header_lines", None)


def parse_header_lines(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip()
        if _WHITESPACE(name) is not None or not name.isascii():
            continue
        out[name.decode("ascii")] = value.strip().decode("utf-8", "replace")
    return out


def install() -> None:
    """Use `parse_header_lines` in every nats-py client of this process (nats-py calls it through
    the instance, so the class attribute is enough). A nats-py without the method is left alone."""
    if _ORIGINAL is not None:
        Client._parse_header_lines = staticmethod(parse_header_lines)
