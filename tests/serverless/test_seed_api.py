"""Issue 11 item 1: the serverless seed's API as written (camelCase, `gpus` = GPU groups, dual
fields both ways) on the intake, the request/reply subjects and `endpoint create`, against a real
claim service on a real nats-server."""

from __future__ import annotations

import json

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.seed import SeedEndpointSpec, convert_seed, from_seed_endpoint, to_seed_endpoint
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running

SEED_ENDPOINT = {"name": "auto-scaling-inference", "imageName": "pytorch:latest",
                 "gpus": ["AMPERE_80", "ADA_80_PRO"], "workersMax": 10, "workersMin": 1,
                 "scalerType": "QUEUE_DELAY", "scalerValue": 4, "cudaVersions": ["12.4", "12.8"]}


def test_dual_fields_sync_both_ways_as_the_seed_does():
    raw = {"name": "e", "gpuIds": "AMPERE_80, ADA_80_PRO", "allowedCudaVersions": "12.4,12.8"}
    from_ids = from_seed_endpoint(convert_seed(raw, SeedEndpointSpec), raw)
    assert from_ids.gpu_groups == ["AMPERE_80", "ADA_80_PRO"] and from_ids.cuda_versions == ["12.4", "12.8"]
    raw = {"name": "e", "gpus": ["ADA_24"], "gpuIds": "AMPERE_80"}
    listed = from_seed_endpoint(convert_seed(raw, SeedEndpointSpec), raw)
    assert listed.gpu_groups == ["ADA_24"]  # the list wins, as the seed's _sync_input_fields_gpu
    back = to_seed_endpoint(from_ids)
    assert back["gpuIds"] == "AMPERE_80,ADA_80_PRO" and back["gpus"] == ["AMPERE_80", "ADA_80_PRO"]
    assert back["allowedCudaVersions"] == "12.4,12.8" and back["workersMax"] == 3 and back["namespace"] == "default"


@pytest.mark.parametrize("seed, message", [
    ({"name": "e", "gpus": ["invalid_gpu"]}, "invalid_gpu is not a valid GpuGroup"),
    ({"name": "e", "gpuIds": "ADA_24,invalid_gpu"}, "invalid_gpu is not a valid GpuGroup - at `$.gpuIds`"),
    ({"name": "e", "allowedCudaVersions": "13.0"}, "13.0 is not a valid CudaVersion - at `$.allowedCudaVersions`"),
])
def test_a_bad_group_or_version_gets_the_seeds_words(seed, message):
    with pytest.raises(ValueError) as err:  # msgspec's ValidationError, or EndpointInvalid
        spec = from_seed_endpoint(convert_seed(seed, SeedEndpointSpec), seed)
        from services.claim.endpoints import validate_endpoint
        validate_endpoint(spec)
    assert message in str(err.value)


@pytest.fixture
async def claim_service(fresh_nats):
    async with running(fresh_nats.url, "claim", endpoint_tick_s=0) as contexts:
        nc = await nats.connect(fresh_nats.url)
        yield nc, contexts[0]
        await nc.close()


async def test_endpoint_create_takes_the_seeds_shape_and_answers_in_it(claim_service):
    nc, _ = claim_service
    reply = await request(nc, subjects.command("endpoint.create"), {"endpoint": SEED_ENDPOINT})
    assert reply["ok"], reply
    resource = reply["data"]["resource"]
    assert resource["gpuIds"] == "AMPERE_80,ADA_80_PRO" and resource["allowedCudaVersions"] == "12.4,12.8"
    assert (resource["workersMin"], resource["workersMax"], resource["imageName"]) == (1, 10, "pytorch:latest")
    got = await request(nc, subjects.query("endpoint.get"), {"name": "auto-scaling-inference"})
    assert got["data"]["spec"]["gpu_groups"] == ["AMPERE_80", "ADA_80_PRO"]
    assert got["data"]["resource"]["gpus"] == ["AMPERE_80", "ADA_80_PRO"]


@pytest.mark.parametrize("endpoint, field, words", [
    ({"name": "e", "gpus": ["invalid_gpu"]}, "endpoint.gpus[0]", "invalid_gpu is not a valid GpuGroup"),
    ({"name": "e", "gpus": ["HOPPER_141"], "cudaVersions": ["11.8"]}, "endpoint.cudaVersions",
     "HOPPER_141 is Hopper"),
    ({"name": "e", "workersMin": 4, "workersMax": 2}, "endpoint.workersMin", "above workers_max"),
    ({"name": "e", "workersMax": 2, "colour": "blue"}, "endpoint.colour", "unknown field"),
])
async def test_a_bad_seed_endpoint_is_refused_in_its_own_names(claim_service, endpoint, field, words):
    nc, _ = claim_service
    reply = await request(nc, subjects.command("endpoint.create"), {"endpoint": endpoint})
    assert not reply["ok"] and reply["error"]["field"] == field and words in reply["error"]["message"], reply


async def test_claim_submit_takes_the_seeds_spelling(claim_service):
    nc, _ = claim_service
    claim = {"claimId": "seed-1", "namespace": "team-a", "gpus": ["ADA_24"], "gpuCount": 2,
             "allowedCudaVersions": "12.4"}
    reply = await request(nc, subjects.command("claim.submit"), {"claim": claim})
    assert reply["ok"], reply
    got = await request(nc, subjects.query("claim.get"), {"claim_id": "seed-1"})
    assert got["data"]["shape"] == "2 x ADA_24"
    bad = await request(nc, subjects.command("claim.submit"),
                        {"claim": {"claimId": "seed-2", "namespace": "team-a", "gpus": ["ADA_80_PRO"],
                                   "cudaVersions": ["11.8"]}})
    assert bad["error"]["field"] == "claim.cudaVersions" and "ADA_80_PRO is Hopper" in bad["error"]["message"]


async def test_the_intake_takes_the_seeds_spelling_and_refuses_in_its_words(claim_service):
    nc, ctx = claim_service
    js = nc.jetstream()
    good = {"claimId": "seed-in-1", "namespace": "team-a", "gpuIds": "AMPERE_80,HOPPER_141",
            "cudaVersions": ["12.4"]}
    bad = {"claimId": "seed-in-2", "namespace": "team-a", "gpus": ["invalid_gpu"]}
    for claim in (good, bad):
        await js.publish(subjects.INTAKE_CLAIMS, json.dumps(claim).encode(), headers={"Nats-Msg-Id": claim["claimId"]})
    await wait_intake_drained(js)
    submitted, rejected = {}, {}
    async for stored in JetStreamEventLog(nc).read():
        for event in ev.flatten(stored.event):
            if isinstance(event, ev.ClaimSubmitted):
                submitted[event.claim.claim_id] = event.claim
            elif isinstance(event, ev.ClaimRejected):
                rejected[event.claim_id] = event.reasons[0]
    assert submitted["seed-in-1"].gpu_groups == ["AMPERE_80", "HOPPER_141"]
    assert submitted["seed-in-1"].cuda_versions == ["12.4"]
    reason = rejected["seed-in-2"]
    assert "invalid_gpu is not a valid GpuGroup" in reason.message and reason.detail["field"] == "gpus[0]"


async def test_endpoint_create_f_sends_a_seed_file_as_written(claim_service, fresh_nats, tmp_path):
    from tests.cli import run_cli

    nc, _ = claim_service
    path = tmp_path / "endpoint.yaml"
    path.write_text("name: from-file\ngpuIds: AMPERE_24,ADA_24\nworkersMax: 2\nimageName: app:1\n")
    made = await run_cli("endpoint", "create", "-f", str(path), "--json", "--nats-url", fresh_nats.url)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["resource"]["gpus"] == ["AMPERE_24", "ADA_24"]
    path.write_text("name: bad\ngpus: [invalid_gpu]\n")
    bad = await run_cli("endpoint", "create", "-f", str(path), "--nats-url", fresh_nats.url)
    assert bad.returncode == 1 and "invalid_gpu is not a valid GpuGroup" in bad.stderr
