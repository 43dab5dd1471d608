"""`claim list` one page at a time: the newest claims first cut, each page under the message limit.

A cursor is the id of the oldest claim the previous page gave; the next page holds the claims
folded before it (the fold's order: submit order, claims of one intake batch in their batch's
order). A page never repeats a claim, and claims submitted meanwhile do not shift the pages (they
are newer than the first one). A cursor naming no claim is refused: the listing starts again."""

from __future__ import annotations

from typing import Reversible

import msgspec

from ledger.state import Claim
from shared.commands import DomainError
from services.claim.views import claim_view

# NATS refuses messages over its max_payload (1 MiB by default); the reply's envelope, headers and
# the JSON of one more claim must fit beside a full page
PAGE_BYTES = 512 * 1024


def page(claims: Reversible[Claim], namespace: str, status: str, limit: int, cursor: str,
         budget: int = PAGE_BYTES) -> tuple[list[dict], str]:
    """(claims newest last, the cursor of the next page or "" when this is the last)."""
    found: list[dict] = []
    size = 0
    oldest = ""
    skipping = bool(cursor)
    for claim in reversed(claims):
        if skipping:
            skipping = claim.claim_id != cursor
            continue
        if (namespace and claim.spec.namespace != namespace) or (status and claim.status != status):
            continue
        if len(found) >= limit:
            return found[::-1], oldest
        view = claim_view(claim)
        size += len(msgspec.json.encode(view)) + 1
        if found and size > budget:
            return found[::-1], oldest
        found.append(view)
        oldest = claim.claim_id
    if skipping:
        raise DomainError("invalid", f"cursor {cursor!r} names no claim: list again without it", "cursor")
    return found[::-1], ""
