"""`claim list --status` with a status that does not exist is refused naming the field. Found by
the session-25 outsider: `gpuledger claim list --status bogus` (and `gpu.qry.claim.list` with
`"status": "bogus"`, or `"Bound"`) answered an empty list, as if no claim had that status."""

from __future__ import annotations

import nats

from schemas import subjects
from tests.service.helpers import request, running


async def test_an_unknown_status_is_refused_and_a_known_one_lists(fresh_nats):
    async with running(fresh_nats.url, "claim"):
        nc = await nats.connect(fresh_nats.url)
        for status in ("bogus", "Bound"):
            reply = await request(nc, subjects.query("claim.list"), {"status": status})
            assert reply["ok"] is False and reply["error"]["field"] == "status", reply
            assert f"Invalid enum value '{status}'" in reply["error"]["message"]
        for status in ("", "lost"):
            reply = await request(nc, subjects.query("claim.list"), {"status": status})
            assert reply["ok"] is True and reply["data"] == [], reply
        await nc.close()
