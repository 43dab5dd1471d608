"""A cluster still forming refuses a replicated stream ("no suitable peers for placement", 10005)
until enough servers joined: `up --cluster 3` and every service wait that out instead of stopping
(it stopped `up` once in the suite, when a server joined late)."""

from __future__ import annotations

import pytest
from nats.js.errors import APIError, NotFoundError

from shared.jetstream import ensure_streams
from shared.retry import Backoff, until_done


class FormingCluster:
    """A JetStream API whose first `refusals` stream creations find too few peers."""

    def __init__(self, refusals: int):
        self.refusals, self.created = refusals, []

    async def stream_info(self, name):
        if name not in self.created:
            raise NotFoundError(code=404, description="stream not found", err_code=10059)

    async def add_stream(self, config):
        if self.refusals:
            self.refusals -= 1
            raise APIError(code=500, description="no suitable peers for placement", err_code=10005)
        self.created.append(config.name)


async def test_streams_are_created_once_the_cluster_has_its_peers():
    js = FormingCluster(refusals=3)
    await until_done(lambda: ensure_streams(js, replicas=3), "create the streams", Backoff((0.0,)))
    assert len(js.created) == 4 and js.refusals == 0


async def test_any_other_refusal_still_stops_at_once():
    class Refusing(FormingCluster):
        async def add_stream(self, config):
            raise APIError(code=400, description="replicas > 1 not supported in non-clustered mode", err_code=10074)

    with pytest.raises(APIError) as err:
        await until_done(lambda: ensure_streams(Refusing(0), replicas=3), "create the streams", Backoff((0.0,)))
    assert err.value.err_code == 10074
