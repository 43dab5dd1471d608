"""One scrape of `GPULEDGER_METRICS` covers the whole stack, and its numbers are the ledger's:
GPUs held, claims by status, pending by reason, quota use, decision passes, intake batches, fold
lag, every service answering."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
SERVICES = {"claim", "allocator", "quota", "pool-controller", "projector", "node-agents", "dashboard"}


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples, sample: str = "", **labels) -> float:
    found = [s.value for s in samples if (not sample or s.name == sample)
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{labels}: {found} in {samples}"
    return found[0]


def test_one_endpoint_has_every_service_and_the_ledgers_numbers(demo):
    demo.cli("claim", "submit", "-n", "metrics-a", "--gpus", "4", "--model", "H100", "--id", "metrics-held",
             "--wait", "30")
    demo.cli("claim", "submit", "-n", "metrics-b", "--gpus", "64", "--model", "H100", "--id",
             "metrics-waits", "--wait", "5")
    asyncio.run(publish_to_intake(demo.url, "metrics-intake"))
    got = json.loads(demo.cli("claim", "get", "metrics-intake", "--json").stdout)
    assert got["claim_id"] == "metrics-intake"

    families = scrape(demo.lines["GPULEDGER_METRICS"])
    up = {s.labels["service"]: s.value for s in families["gpuledger_scrape_up"]}
    assert up == {name: 1.0 for name in SERVICES}
    lagging = {s.labels["service"] for s in families["gpuledger_fold_lag_events"]}
    assert {"claim", "allocator", "quota", "pool-controller", "projector", "dashboard"} <= lagging

    claims = json.loads(demo.cli("claim", "list", "--json").stdout)
    held_gpus = sum(len(c.get("devices", [])) for c in claims if c["status"] in ("allocated", "bound")
                    and not c["shape"].startswith(("1 x MIG", "CPU")))
    allocated = sum(s.value for s in families["gpuledger_gpus"]
                    if s.labels["state"] == "allocated" and s.labels["model"] == "H100")
    assert allocated == held_gpus
    by_status = {s.labels["status"]: s.value for s in families["gpuledger_claims"]}
    assert by_status.get("pending", 0) == sum(1 for c in claims if c["status"] == "pending")
    # 64 H100s on one node: no node could take it even empty, told apart from waiting (issue 11)
    assert value(families["gpuledger_pending_claims"], reason="never-satisfiable") >= 1
    assert value(families["gpuledger_quota_used"], namespace="metrics-a", resource="gpus") == 4.0
    assert value(families["gpuledger_decision_pass_seconds"], sample="gpuledger_decision_pass_seconds_count",
                 service="allocator") > 0
    assert value(families["gpuledger_intake_batch_size"], sample="gpuledger_intake_batch_size_count",
                 service="claim") >= 1
    assert value(families["process_cpu_seconds"], service="allocator") > 0


def test_each_service_serves_its_own_metrics_on_a_remembered_port(demo):
    ports = json.loads((demo.data_dir / "ports.json").read_text())
    for name in SERVICES - {"dashboard"}:
        families = scrape(f"http://127.0.0.1:{ports[f'metrics-{name}']}/metrics")
        assert "process_cpu_seconds" in families, name


async def publish_to_intake(url: str, claim_id: str) -> None:
    """The README's way for systems without our CLI: a JSON ClaimSpec on the durable intake."""
    import nats

    nc = await nats.connect(url)
    claim = {"claim_id": claim_id, "namespace": "metrics-c", "gpus": 1, "models": ["H100"]}
    await nc.jetstream().publish("gpu.intake.claim", json.dumps(claim).encode(),
                                 headers={"Nats-Msg-Id": claim_id})
    await nc.close()
