"""`claim list` in pages: each reply under the message limit, a cursor to the older claims, no
claim given twice or skipped; the pure paging first, then the real subject on a real nats-server."""

from __future__ import annotations

import msgspec
import nats

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, Reason
from shared.jetstream import JetStreamEventLog
from ledger.state import Claim
from services.claim.listing import page
from tests.service.helpers import request, running


def claims(count: int, reason_chars: int = 0) -> list[Claim]:
    out = []
    for i in range(count):
        # claims of one intake batch share the message's log position: the cursor must not rely on it
        claim = Claim(ClaimSpec(claim_id=f"c-{i:05d}", namespace=f"team-{i % 3}"), seq=10 + i // 7, submitted_at=i)
        if reason_chars:
            claim.reasons = [Reason("no-free-gpu", "x" * reason_chars)]
        out.append(claim)
    return out


def ids(views: list[dict]) -> list[str]:
    return [v["claim_id"] for v in views]


def test_pages_go_back_from_the_newest_without_repeats_or_gaps():
    every = claims(25)
    seen, cursor = [], ""
    for _ in range(10):
        views, cursor = page(every, "", "", 10, cursor)
        assert len(views) <= 10
        seen = ids(views) + seen
        if not cursor:
            break
    assert seen == [c.claim_id for c in every]


def test_a_page_is_cut_by_size_before_it_is_cut_by_count():
    views, cursor = page(claims(100, reason_chars=1000), "", "", 100, "", budget=20_000)
    assert 0 < len(views) < 100 and cursor
    assert len(msgspec.json.encode(views)) <= 20_000 + 100
    rest, _ = page(claims(100, reason_chars=1000), "", "", 100, cursor, budget=20_000)
    assert int(views[0]["claim_id"][2:]) - 1 == int(rest[-1]["claim_id"][2:])


def test_filters_apply_before_the_limit():
    views, cursor = page(claims(30), "team-1", "", 5, "")
    assert ids(views) == [f"c-{i:05d}" for i in (16, 19, 22, 25, 28)] and cursor
    views, cursor = page(claims(30), "team-1", "", 5, cursor)
    assert ids(views) == [f"c-{i:05d}" for i in (1, 4, 7, 10, 13)] and not cursor


async def test_listing_thousands_of_claims_answers_in_pages_under_the_limit(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        total = 6000  # with 100-character ids, over 1 MiB in one reply (which then got no answer)
        for start in range(0, total, 500):
            batch = [ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"many-{i:05d}-{'y' * 90}", namespace="team-a"),
                                       at=1.0) for i in range(start, start + 500)]
            await log.append(subjects.INTAKE_BATCHES, ev.EventBatch(events=batch, at=1.0))
        last = f"many-{total - 1:05d}-{'y' * 90}"
        while not (await request(nc, subjects.query("claim.get"), {"claim_id": last}, timeout=60))["ok"]:
            pass  # the service folds what was appended (a busy machine takes a while)
        seen, cursor, pages = [], "", 0
        while True:
            msg = await nc.request(subjects.query("claim.list"), msgspec.json.encode(
                {"limit": 100000, "cursor": cursor}), timeout=60)
            assert len(msg.data) < nc.max_payload
            reply = msgspec.json.decode(msg.data)
            assert reply["ok"], reply
            seen = ids(reply["data"]) + seen
            pages += 1
            cursor = reply.get("next", "")
            if not cursor:
                break
        assert seen == [f"many-{i:05d}-{'y' * 90}" for i in range(total)] and pages >= 2
        for bad_cursor in ("12; drop", "no-such-claim"):
            bad = await request(nc, subjects.query("claim.list"), {"cursor": bad_cursor})
            assert not bad["ok"] and bad["error"]["field"] == "cursor", bad
        await nc.close()
