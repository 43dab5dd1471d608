"""The intake is bounded, and full it refuses new claims with a clear error, losing none it took
(session 31's outsider).

The work-queue stream `GPULEDGER_INTAKE` had no limits: whatever was published while the claim
service was down, slow or catching up stayed on nats-server's disk, and a publisher (any holder of
the `publisher` user) could fill that disk with 1 MiB messages far faster than the claim service
turns them into dead letters; a full disk stops the whole stack until nats-server is restarted
(docs/reliability.md, "A full disk"). Now it holds at most GPULEDGER_INTAKE_MAX_MSGS messages and
GPULEDGER_INTAKE_MAX_BYTES bytes: past either, nats-server answers the publish with 503
"maximum messages exceeded" / "maximum bytes exceeded" (err_code 10077) and keeps everything it
acknowledged; `gpuledger up` sets the limits on an intake made before they existed."""

from __future__ import annotations

import asyncio
import json
import sys

import msgspec
import nats
import pytest
from nats.js import api
from nats.js.errors import ServiceUnavailableError

from schemas import subjects
from services.claim.intake import wait_intake_drained
from shared.jetstream import INTAKE_MAX_BYTES, INTAKE_MAX_MSGS, ensure_streams, intake_stream_config
from tests.service.helpers import request, running

pytestmark = pytest.mark.timeout(120)


def _claim(n: int) -> bytes:
    return msgspec.json.encode({"claim_id": f"c-{n}", "namespace": "team-a", "gpus": 0, "cpu_milli": 1})


async def test_a_full_intake_refuses_new_claims_and_keeps_every_one_it_took(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    await ensure_streams(js, intake_max_msgs=5)
    taken, refused = [], []
    for n in range(8):  # the claim service is not running: nothing drains the intake
        try:
            await js.publish(subjects.INTAKE_CLAIMS, _claim(n), headers={"Nats-Msg-Id": f"c-{n}"})
            taken.append(f"c-{n}")
        except ServiceUnavailableError as err:
            refused.append((f"c-{n}", err.err_code, err.description))
    assert taken == [f"c-{n}" for n in range(5)]
    assert refused == [(f"c-{n}", 10077, "maximum messages exceeded") for n in range(5, 8)]
    # what an operator sees: `status` says it is full, and exits 1
    status = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuledger_cli.main", "status", "--json", "--nats-url", fresh_nats.url,
        "--timeout", "1", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(status.communicate(), 120)
    assert status.returncode == 1 and json.loads(out)["intake"]["full"] == "5 of 5 messages"
    assert "the intake is full (5 of 5 messages): nats-server refuses every new claim" in err.decode()
    async with running(fresh_nats.url, "claim", intake_max_msgs=5):
        await wait_intake_drained(js, timeout=60)
        for claim_id in taken:  # every acknowledged claim was handled
            reply = await request(nc, subjects.query("claim.get"), {"claim_id": claim_id})
            assert reply["ok"] and reply["data"]["status"] == "pending", reply
        # drained, the intake takes claims again (the refused one, sent again)
        await js.publish(subjects.INTAKE_CLAIMS, _claim(5), headers={"Nats-Msg-Id": "c-5"})
        await wait_intake_drained(js, timeout=60)
        reply = await request(nc, subjects.query("claim.get"), {"claim_id": "c-5"})
        assert reply["ok"], reply
    await nc.close()


async def test_bytes_are_bounded_too(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    await ensure_streams(js, intake_max_bytes=1 << 20)
    big = b" " * (300 * 1024) + _claim(0)  # whitespace is valid JSON: anyone can send a big claim
    outcomes = []
    for n in range(5):
        try:
            await js.publish(subjects.INTAKE_CLAIMS, big)
            outcomes.append("stored")
        except ServiceUnavailableError as err:
            outcomes.append(err.description)
    assert outcomes == ["stored"] * 3 + ["maximum bytes exceeded"] * 2
    await nc.close()


async def test_a_stack_made_before_the_limits_gets_them_from_up(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    old = intake_stream_config()
    old.max_msgs, old.max_bytes, old.discard = -1, -1, api.DiscardPolicy.OLD  # as sessions 1-30 made it
    await js.add_stream(old)
    await js.publish(subjects.INTAKE_CLAIMS, _claim(0))
    await ensure_streams(js)  # a service's start leaves an existing stream alone (it may not update)
    assert (await js.stream_info(subjects.INTAKE_STREAM)).config.max_msgs == -1
    await ensure_streams(js, update_limits=True)  # `gpuledger up`'s, as ops
    info = await js.stream_info(subjects.INTAKE_STREAM)
    assert (info.config.max_msgs, info.config.max_bytes, info.config.discard) == (
        INTAKE_MAX_MSGS, INTAKE_MAX_BYTES, api.DiscardPolicy.NEW)
    assert info.state.messages == 1  # what it held is still there
    await nc.close()


async def test_a_node_publisher_is_told_which_limit(fresh_nats):
    """docs/contract.md says what nats.js shows: a NatsError "503" (as for no responders), with the
    JetStream API's answer in `api_error` naming the limit."""
    from tests.contract.node import require_node, run_node

    require_node()
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream(), intake_max_msgs=2)
    claims = [{"claim_id": f"n-{n}", "namespace": "team-a", "gpus": 0, "cpu_milli": 1} for n in range(3)]
    answers = await asyncio.to_thread(run_node, "full_intake.mjs", json.dumps(claims),
                                      env={"GPULEDGER_PUBLISHER_URL": fresh_nats.url})
    assert answers[:2] == [{"stored": 1}, {"stored": 2}]
    assert answers[2] == {"error": "503", "code": "503", "api_error": {
        "code": 503, "err_code": 10077, "description": "maximum messages exceeded"}}
    await nc.close()
