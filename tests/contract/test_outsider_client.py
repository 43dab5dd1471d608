"""Another team's Node.js client, written from the README, docs/contract.md and schemas/json alone
(tests/contract/js/outsider.mjs), run as the restricted `publisher` user of a server with
gpuledger's real users and permissions (shared.nats_auth), against the claim service and the
allocator: everything the docs say another system can do works as they say, and every message it
sends and reads is valid against its schema."""

from __future__ import annotations

import asyncio
import uuid

import nats
import pytest

from shared import nats_auth
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import free_port, start_nats_server
from tests.contract.node import require_node, run_node
from tests.service.helpers import h100_node, register_nodes, running


@pytest.fixture(scope="module")
async def users_server(tmp_path_factory):
    """The URL of each user (`url(user)`) of a nats-server with every gpuledger user and its
    permissions."""
    tmp_path = tmp_path_factory.mktemp("users")
    roles = nats_auth.roles()
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    port = free_port()
    server = start_nats_server(tmp_path / "nats", port, config_file=conf)
    def url(user: str) -> str:
        return nats_auth.user_url(user, passwords[user], "127.0.0.1", port)

    ops = await nats.connect(url(nats_auth.OPS))
    await ensure_streams(ops.jetstream())
    await ops.close()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def outsider(users_server):
    """What the client saw, run once for every test of this file."""
    require_node()
    ops_url, publisher_url = users_server(nats_auth.OPS), users_server(nats_auth.PUBLISHER)
    async with running(users_server, "claim", "allocator"):  # each as its own user, as `up` runs them
        nc = await nats.connect(ops_url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"), h100_node("node-b"))
        await nc.close()
        yield await asyncio.to_thread(run_node, "outsider.mjs", uuid.uuid4().hex[:6], timeout=150.0,
                                      env={"GPULEDGER_PUBLISHER_URL": publisher_url,
                                           "GPULEDGER_NATS_URL": ops_url})


def test_everything_it_sent_and_read_matches_the_schemas(outsider):
    assert outsider["schemaErrors"] == []


def test_the_intake_with_a_message_id_answers_by_subscription_and_dedups(outsider):
    a = outsider["a"]
    assert a["ack"]["stream"] == "GPULEDGER_INTAKE" and not a["ack"]["duplicate"]
    assert a["seen"][-1] == "allocated" and a["again"] == {**a["ack"], "duplicate": True}
    assert a["last"]["status"] == "allocated" and len(a["last"]["devices"]) == 2
    assert outsider["repeat"]["ack"]["duplicate"] is False  # a new message id: stored, then a repeat


def test_the_intake_without_a_message_id_works_and_direct_get_reads_it(outsider):
    b = outsider["b"]
    assert b["last"]["status"] == "allocated" and b["last"]["devices"][0]["milli"] == 250


def test_a_resubmit_with_other_content_is_a_conflict_the_request_says(outsider):
    assert outsider["conflict"]["error"]["code"] == "conflict"
    assert outsider["conflict"]["error"]["field"] == "claim.claim_id"


def test_the_request_submit_waits_for_the_allocation(outsider):
    c = outsider["c"]
    assert c["ok"] and c["data"]["status"] == "allocated" and c["data"]["env"]["CUDA_VISIBLE_DEVICES"]
    assert c["data"]["duplicate"] is False


def test_a_gang_is_placed_together(outsider):
    assert [m["status"] for m in outsider["gang"]] == ["allocated", "allocated"]


def test_refusals_name_the_field_in_the_outcome(outsider):
    bad, dup = outsider["bad"], outsider["dup"]
    assert bad["status"] == "rejected" and bad["final"] and bad["code"] == "invalid"
    assert bad["reasons"][0]["field"] == "gpus"
    assert dup["status"] == "rejected" and dup["reasons"][0]["field"] == "gpus"
    assert "duplicate key `gpus`" in dup["reasons"][0]["message"]
    reserved = outsider["reserved"]
    assert reserved["status"] == "rejected" and reserved["reasons"][0]["field"] == "workload"
    assert outsider["reservedBySchema"] is True


def test_what_the_publisher_may_not_do_the_ops_user_does(outsider):
    assert outsider["publisherRelease"] == "PERMISSIONS_VIOLATION"
    assert outsider["release"]["ok"] and outsider["released"]["status"] == "released"
    assert outsider["released"]["final"] and outsider["released"]["code"] == "released"
    assert outsider["explain"]["ok"] and outsider["explain"]["data"]["timeline"]
    assert outsider["endpoint"] == {"ok": True, "data": {"endpoint": outsider["endpoint"]["data"]["endpoint"],
                                                         "created": True}}
