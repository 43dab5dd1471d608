"""A claim id as a person types it: the whole id, or a prefix that only one claim has.

`claim list` shows ids like `9636967f-8741-4c1e-...`; people copy the first characters. The claim
service answers `gpu.qry.claim.resolve` with the one full id a prefix stands for, so the CLI and
the dashboard accept prefixes while programs keep sending whole ids to the commands themselves
(a release by prefix from a program would be a footgun: `train-4` must not release `train-42`).
"""

from __future__ import annotations

from collections.abc import Iterable

SHOWN_CANDIDATES = 10


class Unresolved(Exception):
    """No claim, or more than one, answers to what was given."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def claim_with_prefix(given: str, known: Iterable[str]) -> str:
    """The one id in `known` that starts with `given` (the caller has tried the whole id first). A
    scan of every id, a few ms per 100,000 claims: this answers people, not the hot path."""
    if not given:
        raise Unresolved("invalid", "a claim id (or the start of one) is needed")
    matches = sorted({claim_id for claim_id in known if claim_id.startswith(given)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise Unresolved("not-found", f"no claim {given!r} (and no claim id starts with it)")
    shown = ", ".join(matches[:SHOWN_CANDIDATES])
    more = f" and {len(matches) - SHOWN_CANDIDATES} more" if len(matches) > SHOWN_CANDIDATES else ""
    raise Unresolved("ambiguous", f"claim id prefix {given!r} matches {len(matches)} claims: "
                                  f"{shown}{more}; type more of the id")
