"""The shared `publisher` user reads plain claims' outcomes only, never a publishing system's:
its direct get is the form whose subject is in the request subject, narrowed to
`gpu.outcome.claim.>`, so nats-server checks the subject. Before (session 24's open end, docs/
security.md), it kept the gets whose subject is in the body (`$JS.API.DIRECT.GET.<stream>` with
`last_by_subj`, `$JS.API.STREAM.MSG.GET`), the by-subject form of any subject and the outcome
stream's info (whose subjects filter lists every system's claim tokens): it read a system's
outcome (namespace, node, devices, env) by naming or listing its subject."""

from __future__ import annotations

import json

from schemas import subjects
from shared import nats_auth
from tests.contract.test_outcomes import outcome_when
from tests.tenants.conftest import tenants  # noqa: F401 (the fixture)
from tests.tenants.test_own_outcomes import _held, _intake

OUTCOMES = subjects.OUTCOMES_STREAM
DIRECT = f"$JS.API.DIRECT.GET.{OUTCOMES}"


async def test_the_publisher_cannot_read_a_system_s_outcome_in_any_form(tenants):  # noqa: F811
    billing = await tenants.server.connect("system-billing")
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    await _intake(billing, "billing", "bill-p1", "team-a")
    await outcome_when(billing.nc.jetstream(), "bill-p1", _held, system="billing")
    billing_s = subjects.outcome("bill-p1", "billing")
    await _intake(publisher, "", "plain-p1", "team-z")
    plain = await outcome_when(publisher.nc.jetstream(), "plain-p1", _held)  # by subject: still works
    assert plain.devices and plain.system == ""
    for request in (DIRECT, f"{DIRECT}.{billing_s}", f"{DIRECT}.gpu.outcome.system.>", f"{DIRECT}.gpu.outcome.>",
                    f"$JS.API.STREAM.MSG.GET.{OUTCOMES}", f"$JS.API.STREAM.INFO.{OUTCOMES}"):
        assert await publisher.refused(request), request
    assert not await publisher.refused(f"{DIRECT}.{subjects.outcome('plain-p1')}")
    assert not await publisher.refused(f"$JS.API.STREAM.INFO.{subjects.INTAKE_STREAM}")


async def test_a_body_on_the_publisher_s_direct_get_reads_no_system_s_outcome(tenants):  # noqa: F811
    """The narrowing holds only if nats-server answers a by-subject direct get for its subject
    alone, whatever the body asks: checked on the server the tests run."""
    billing = await tenants.server.connect("system-billing")
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    await _intake(billing, "billing", "bill-p2", "team-b")
    await outcome_when(billing.nc.jetstream(), "bill-p2", _held, system="billing")
    await _intake(publisher, "", "plain-p2", "team-z")
    await outcome_when(publisher.nc.jetstream(), "plain-p2", _held)
    own = subjects.outcome("plain-p2")
    for body in ({"last_by_subj": subjects.outcome("bill-p2", "billing")}, {"seq": 1}, {"seq": 2},
                 {"next_by_subj": "gpu.outcome.>", "seq": 1}, {"multi_last": ["gpu.outcome.>"]}):
        reply = await publisher.nc.request(f"{DIRECT}.{own}", json.dumps(body).encode(), timeout=10)
        assert (reply.headers or {}).get("Nats-Subject") in (None, own) and b"bill-p2" not in reply.data, (body, reply)
    # a wildcard in the permitted form stays within plain outcomes
    reply = await publisher.nc.request(f"{DIRECT}.gpu.outcome.claim.>", b"", timeout=10)
    assert (reply.headers or {}).get("Nats-Subject", own).startswith("gpu.outcome.claim."), reply
