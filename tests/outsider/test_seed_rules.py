"""Rules of the seeds tried one by one from outside (session 35, docs/outsider.md "Session 35:
the seeds' rules, one by one"): the ones that failed, each checked where a client meets it.

- Seed 000, `_sync_input_fields_gpu`: `gpuIds` / `allowedCudaVersions` are split on commas and
  only the entries that are not empty after `strip()` are kept, so `"AMPERE_80, ADA_80_PRO,"`
  (a trailing comma, as string joins in many languages leave) and `"A,,B"` are the list [A, B].
  gpuledger refused both ("an empty entry is not a valid GpuGroup"), on the intake, on
  `gpu.cmd.claim.submit`, `gpu.cmd.endpoint.create` and in the JSON Schema.
- Seed 004 / the contract: a pool's `maxDevicesPerNode` below 0 is refused by the pool controller,
  but the JSON Schema of `CreatePool`/`UpdatePool` had no minimum, so a client that validated first
  sent what was then refused (the same kind as session 34's `workers_max`).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from services.claim.seed_api import decode_create_endpoint, decode_submit_claim
from schemas.seed import to_seed_endpoint

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "json"


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.json").read_text())


# (gpuIds as a client wrote it, the groups the seed's `_sync_input_fields_gpu` makes of it)
SEED_LISTS = [
    ("AMPERE_80, ADA_80_PRO,", ["AMPERE_80", "ADA_80_PRO"]),
    ("AMPERE_80,,ADA_80_PRO", ["AMPERE_80", "ADA_80_PRO"]),
    (",HOPPER_141", ["HOPPER_141"]),
    ("ADA_24 , ,\tAMPERE_24 ,", ["ADA_24", "AMPERE_24"]),
]


@pytest.mark.parametrize("text, groups", SEED_LISTS)
def test_an_endpoint_keeps_the_entries_of_gpu_ids_that_are_not_empty(text, groups):
    body = json.dumps({"endpoint": {"name": "e", "gpuIds": text, "allowedCudaVersions": "12.4,,12.8,"}})
    spec = decode_create_endpoint(body.encode()).endpoint
    assert spec.gpu_groups == groups and spec.cuda_versions == ["12.4", "12.8"]
    assert to_seed_endpoint(spec)["gpuIds"] == ",".join(groups)


@pytest.mark.parametrize("text, groups", SEED_LISTS)
def test_a_claim_keeps_the_entries_of_gpu_ids_that_are_not_empty(text, groups):
    claim = {"claimId": "c-1", "namespace": "team-a", "gpuIds": text, "allowedCudaVersions": "12.4,"}
    assert decode_submit_claim(json.dumps({"claim": claim}).encode()).claim.gpu_groups == groups
    # the JSON Schema says the same as the service (a client that validates first)
    jsonschema.validate(claim, _schema("claim"))
    jsonschema.validate({"claim": claim}, _schema("command.SubmitClaim"))
    jsonschema.validate({"endpoint": {"name": "e", "gpuIds": text}}, _schema("command.CreateEndpoint"))


def test_only_commas_and_blanks_are_as_if_gpu_ids_were_left_out():
    spec = decode_create_endpoint(b'{"endpoint": {"name": "e", "gpuIds": " , ,"}}').endpoint
    assert spec.gpu_groups == ["any"]  # the default, as the seed's `gpus=[GpuGroup.ANY]`


@pytest.mark.parametrize("text, words", [
    ("ADA_24,,invalid_gpu", "invalid_gpu is not a valid GpuGroup - at `$.endpoint.gpuIds`"),
    ("ADA_24,\u00a0AMPERE_80", "'\\xa0AMPERE_80' is not a valid GpuGroup - at `$.endpoint.gpuIds`"),
])
def test_a_bad_entry_is_still_refused_in_the_seeds_words(text, words):
    body = json.dumps({"endpoint": {"name": "e", "gpuIds": text}}).encode()
    with pytest.raises(msgspec.ValidationError, match=None) as err:
        decode_create_endpoint(body)
    assert str(err.value) == words
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"endpoint": {"name": "e", "gpuIds": text}}, _schema("command.CreateEndpoint"))


@pytest.mark.parametrize("name", ["command.CreatePool", "command.UpdatePool"])
def test_the_json_schema_refuses_the_negative_device_limit_the_pool_controller_refuses(name):
    body = {"pool": {"name": "p1", "max_devices_per_node": -1}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _schema(name))
    jsonschema.validate({"pool": {"name": "p1", "max_devices_per_node": 0}}, _schema(name))


@pytest.mark.parametrize("product, model", [("NVIDIA RTX A4500", "RTXA4500"),
                                            ("NVIDIA RTX 4000 Ada Generation", "RTX4000ADA")])
def test_every_card_of_the_seeds_ampere_16_is_placed_for_the_group(product, model):
    """Seed 000: `AMPERE_16 = "AMPERE_16"  # RTX A4000, A4500, RTX 4000 Ada`. The catalogue had the
    A4000 alone: an agent on an A4500 or an RTX 4000 Ada host found a product the catalogue did not
    know, and a claim for the group never got such a card."""
    from schemas import events as ev
    from services.node_agent.discovery import discover, nvml_session
    from services.node_agent.fakenvml import FakeNvml
    from services.node_agent.fleet import parse_fleet
    from tests.fleet import Ledger, claim

    nvml = FakeNvml.from_node_spec(parse_fleet("1xRTXA4000x2")[0])
    for gpu in nvml.gpus:
        gpu.name, gpu.memory_mib = product, 20470
    with nvml_session(nvml):
        cards = discover(nvml, "small").infos()
    assert {c.model for c in cards} == {model}
    ledger = Ledger()
    ledger.append(ev.NodeRegistered(node="small", devices=cards, cpu_milli=64000, memory_mib=1 << 19,
                                    cuda_version="12.8"),
                  claim("c1", gpus=2, gpu_groups=["AMPERE_16"], cuda_versions=["12.4"]))
    decided = [d for d in ledger.decide(1.0) if isinstance(d, ev.ClaimAllocated)]
    assert [d.claim_id for d in decided] == ["c1"] and decided[0].node == "small"


def test_the_gpuclaim_crd_bounds_a_gang_as_the_claim_service_does():
    """Seed 001's `gangRef`: the GpuClaim CRD let `gangSize` go to 4,096 while the claim service
    refuses a gang of more than 256 (session 29), so the API server stored GpuClaims that could
    only ever be refused."""
    import yaml

    from schemas.claim_rules import MAX_GANG_SIZE

    crds = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "crds.yaml").read_text()))
    gpuclaim = next(c for c in crds if c["spec"]["names"]["kind"] == "GpuClaim")
    spec = gpuclaim["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["gangSize"]["maximum"] == MAX_GANG_SIZE
    assert spec["devices"]["properties"]["count"]["maximum"] == 64


async def test_a_pools_scheduling_may_change_after_creation_and_every_fold_sees_it(fresh_nats):
    """Seed 004: immutable after creation are `resource`, `allocation` (mode, migProfile,
    slicesPerUnit, maxDevicesPerNode), `deviceSelector`, `nodeSelector`, `backend`, `provider`;
    the GPUPool CRD lets `scheduling` change too. The controller refused a new strategy ("immutable
    after creation: strategy"), so a `kubectl apply` the API server took was never applied."""
    import nats

    from ledger.evolve import evolve
    from ledger.state import State
    from schemas import subjects
    from shared.jetstream import JetStreamEventLog
    from tests.service.helpers import request, running

    async with running(fresh_nats.url, "pool-controller"):
        nc = await nats.connect(fresh_nats.url)
        pool = {"name": "spread-me", "slices_per_unit": 2, "access_namespaces": ["team-a"]}
        assert (await request(nc, subjects.command("pool.create"), {"pool": pool}))["ok"]
        wanted = pool | {"strategy": "Spread", "topology_key": "topology.kubernetes.io/zone"}
        reply = await request(nc, subjects.command("pool.update"), {"pool": wanted})
        assert reply["ok"] and reply["data"]["changed"] is True, reply
        got = (await request(nc, subjects.query("pool.get"), {"name": "spread-me"}))["data"]["spec"]
        assert (got["strategy"], got["topology_key"]) == ("Spread", "topology.kubernetes.io/zone")
        # still refused: what the seed makes immutable, and a strategy that is none
        for bad, field in ((wanted | {"slices_per_unit": 4}, "pool.slices_per_unit"),
                           (wanted | {"strategy": "Random"}, "pool.strategy")):
            refused = await request(nc, subjects.command("pool.update"), {"pool": bad})
            assert refused["ok"] is False and refused["error"]["field"] == field, refused
        state = State()  # a fresh fold of the log, as any service starting
        async for stored in JetStreamEventLog(nc).read():
            evolve(state, stored.event, stored.seq)
        assert state.pools["spread-me"].strategy == "Spread"
        assert state.pools["spread-me"].access_namespaces == ["team-a"]
        await nc.close()


async def test_pool_create_says_when_the_pool_selects_no_device(fresh_nats, tmp_path):
    """Seed 004's `nodeSelector` written the Kubernetes way (`kubernetes.io/hostname`) is matched
    against the labels node agents register, which do not carry the Node's labels (docs/outsider.md
    4.17, open): such a pool was created holding no device, without a word."""
    import nats

    from shared.jetstream import JetStreamEventLog
    from tests.cli import run_cli
    from tests.service.helpers import h100_node, register_nodes, running

    async with running(fresh_nats.url, "pool-controller"):
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        await nc.close()
        empty, full = tmp_path / "empty.json", tmp_path / "full.json"
        empty.write_text(json.dumps({"name": "by-host", "node_selector": {"kubernetes.io/hostname": "node-a"}}))
        full.write_text(json.dumps({"name": "all-h100", "include": {"products": ["NVIDIA H100 80GB HBM3"]}}))
        said = await run_cli("pool", "create", "-f", str(empty), "--nats-url", fresh_nats.url)
        assert said.returncode == 0 and "pool by-host created" in said.stdout, said.stderr
        assert "note: pool by-host holds no device" in said.stderr, said.stderr
        assert "labels node agents register" in said.stderr
        quiet = await run_cli("pool", "create", "-f", str(full), "--nats-url", fresh_nats.url)
        assert quiet.returncode == 0 and "note:" not in quiet.stderr, quiet.stderr
