"""A serverless endpoint's numbers are bounded like a claim's. Found by the session-25 outsider:
`gpu.cmd.endpoint.create` stored `workers_max: 10**24`, `priority: 10**26`, `scaler_value: 10**26`
and `idle_timeout_s: 1e300` as they came, and its autoscaler then appended a worker claim with
priority 10**26 (claims allow -1000..1000: the claim service logged "predates a constraint it
breaks: folded as stored"); a load report stored `queued: 10**26` and `oldest_wait_s: 1e308`.
A number past 2^64 in a claim cannot be written in the allocator's snapshot."""

from __future__ import annotations

import nats
import pytest

from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running


@pytest.fixture
async def nc(fresh_nats):
    async with running(fresh_nats.url, "claim", endpoint_tick_s=0):
        conn = await nats.connect(fresh_nats.url)
        yield conn
        await conn.close()


@pytest.mark.parametrize("spec, field, words", [
    ({"workers_max": 10**24}, "endpoint.workers_max", "<= 10000"),
    ({"workers_min": 10**6, "workers_max": 10**6}, "endpoint.workers_min", "<= 10000"),
    ({"priority": 10**26}, "endpoint.priority", "<= 1000"),
    ({"priority": -(10**26)}, "endpoint.priority", ">= -1000"),
    ({"scaler_value": 10**26}, "endpoint.scaler_value", "<= 1000000"),
    ({"idle_timeout_s": 1e300}, "endpoint.idle_timeout_s", "<= 31622400"),
    ({"workersMax": 10**24}, "endpoint.workersMax", "<= 10000"),  # the seed's spelling
    ({"idleTimeout": 1e300}, "endpoint.idleTimeout", "<= 31622400"),
])
async def test_huge_endpoint_numbers_are_refused_naming_the_field(nc, spec, field, words):
    reply = await request(nc, subjects.command("endpoint.create"),
                          {"endpoint": {"name": "chat", "namespace": "team-a", **spec}})
    assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
    assert reply["error"]["field"] == field and words in reply["error"]["message"], reply
    assert [s async for s in JetStreamEventLog(nc).read()] == []


@pytest.mark.parametrize("load, field", [
    ({"queued": 10**26}, "queued"),
    ({"queued": 1, "oldest_wait_s": 1e308}, "oldest_wait_s"),
    ({"queued": 1, "requests_per_min": 1e300}, "requests_per_min"),
])
async def test_a_huge_load_report_is_refused_naming_the_field(nc, load, field):
    created = await request(nc, subjects.command("endpoint.create"),
                            {"endpoint": {"name": "chat", "namespace": "team-a", "workers_max": 10_000,
                                          "priority": 1000}})
    assert created["ok"], created
    reply = await request(nc, subjects.command("endpoint.load"), {"name": "chat", **load})
    assert reply["ok"] is False and reply["error"]["field"] == field, reply
    assert "must be at most" in reply["error"]["message"]


@pytest.mark.parametrize("name, body", [
    ("command.CreateEndpoint", {"endpoint": {"name": "chat", "namespace": "team-a", "workers_max": 0}}),
    ("command.CreateEndpoint", {"endpoint": {"name": "chat", "workersMax": 0}}),  # the seed's spelling
    ("command.UpdateEndpoint", {"endpoint": {"name": "chat", "namespace": "team-a", "workers_max": 0}}),
])
def test_the_json_schema_refuses_the_worker_bound_the_service_refuses(name, body):
    """Session 34: `workers_max` had minimum 0 in the JSON Schema (and docs/endpoints.md said
    1..10,000 for both bounds), while the service refuses an endpoint of no workers: a client that
    validated first (ajv, jsonschema) sent what was then refused."""
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "json" / f"{name}.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema)


async def test_an_endpoint_of_no_workers_is_refused_naming_the_field(nc):
    reply = await request(nc, subjects.command("endpoint.create"),
                          {"endpoint": {"name": "chat", "namespace": "team-a", "workers_max": 0}})
    assert reply["ok"] is False and reply["error"]["field"] == "endpoint.workers_max", reply
    assert ">= 1" in reply["error"]["message"], reply
