"""A quota command is checked against the whole log, also while the quota service is still reading
it after a start (session 31's outsider). Its writes were checked against the part its fold had
read so far: `quota delete` of a namespace whose quota it had not read yet answered `not-found`,
and `quota apply` of a manifest equal to an older spec called it `unchanged` and stored nothing
(the newer spec stayed). Now each write first reads the log to its end.

The fold is held back (as in test_intake_while_catching_up.py) for as long as a big log's
catch-up takes."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from tests.outsider.test_intake_while_catching_up import _ask, held_fold  # noqa: F401 (the fixture)
from tests.service.helpers import running

pytestmark = pytest.mark.timeout(120)



async def test_a_delete_during_catch_up_finds_the_quota(fresh_nats, held_fold):  # noqa: F811
    nc = await nats.connect(fresh_nats.url)
    held_fold.set()  # the first start reads as usual
    async with running(fresh_nats.url, "quota"):
        for namespace in ("team-a", "team-b"):
            reply = await _ask(nc, subjects.command("quota.set"), {"namespace": namespace, "max_workers": 4})
            assert reply["ok"], reply
        reply = await _ask(nc, subjects.command("quota.default.set"), {"max_workers": 2})
        assert reply["ok"], reply
    held_fold.clear()  # the restart's catch-up is held
    async with running(fresh_nats.url, "quota"):
        asked = [asyncio.ensure_future(_ask(nc, subjects.command(c), body)) for c, body in (
            ("quota.delete", {"namespace": "team-a"}), ("quota.default.delete", {}),
            ("quota.apply", {"quotas": [{"namespace": "team-b", "max_workers": 8}]}))]
        await asyncio.sleep(1.0)  # room for the commands to be answered before the fold has read the log
        held_fold.set()
        deleted, default_deleted, applied = await asyncio.gather(*asked)
        assert deleted["ok"] and deleted["data"]["deleted"], deleted
        assert default_deleted["ok"], default_deleted
        assert applied["ok"] and applied["data"]["results"][0]["action"] == "configured", applied
        listed = await _ask(nc, subjects.command("quota.list"), {})
        specs = {q["namespace"]: q["spec"] for q in listed["data"]}
        assert list(specs) == ["team-b"] and specs["team-b"]["total"]["max_workers"] == 8, specs
    await nc.close()
