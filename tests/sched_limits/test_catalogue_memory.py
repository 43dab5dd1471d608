"""The catalogue's memory against what NVML reports (schemas/catalogue.py `nvml_mib`): a card
reports a little less than its name says (an H100 80GB: 81,559 MiB, 79.65 GiB), node agents
register NVML's figure, and a claim for the named size must still take the card it names.
Before session 34 an A100 40GB registered as the catalogue's 80 GB A100 (a claim for 60 GiB of
an A100 could land on 40), and an H100 NVL (94 GB) as an 80 GB H100 (a claim for 90 GiB of one
could never place)."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.catalogue import CATALOGUE, MODELS, model_for_product
from schemas.types import DeviceInfo
from services.node_agent.discovery import discover, nvml_session
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import parse_fleet
from tests.fleet import Ledger, claim

# nvidia-smi --query-gpu=name,memory.total on current drivers, per product (MiB)
NVML_REPORTS = {
    "NVIDIA H200": 143771, "NVIDIA H100 80GB HBM3": 81559, "NVIDIA H100 PCIe": 81559,
    "NVIDIA H100 NVL": 95830, "NVIDIA A100-SXM4-80GB": 81920, "NVIDIA A100 80GB PCIe": 81920,
    "NVIDIA A100-SXM4-40GB": 40960, "NVIDIA A100-PCIE-40GB": 40960, "NVIDIA L40S": 46068,
    "NVIDIA L40": 46068, "NVIDIA A40": 46068, "NVIDIA RTX A6000": 49140, "NVIDIA L4": 23034,
    "NVIDIA GeForce RTX 4090": 24564, "Tesla T4": 15360, "NVIDIA A10": 23028,
}


def one_card_node(model: str, memory_mib: int, product: str = "") -> ev.NodeRegistered:
    devices = [DeviceInfo(uuid=f"GPU-{model}", index=0, model=model, memory_mib=memory_mib, product=product)]
    return ev.NodeRegistered(node=f"n-{model.lower()}", devices=devices, cpu_milli=64000, memory_mib=1 << 19,
                             cuda_version="12.8")


def placed(ledger: Ledger, now: float) -> dict[str, ev.ClaimAllocated]:
    return {d.claim_id: d for d in ledger.decide(now) if isinstance(d, ev.ClaimAllocated)}


@pytest.mark.parametrize("product, mib", sorted(NVML_REPORTS.items()))
def test_the_catalogue_knows_what_nvml_reports_for_each_product(product, mib):
    model = model_for_product(product)
    assert model is not None and product in model.products
    assert model.nvml_mib == mib
    # the name's size is the nominal one: NVML reports at most it and at least 90 % of it
    assert 0.9 * model.memory_gib * 1024 <= mib <= model.memory_gib * 1024 * 1.001


@pytest.mark.parametrize("model", [m for m in CATALOGUE], ids=lambda m: m.name)
def test_a_claim_for_the_named_size_takes_a_card_that_reports_nvmls_figure(model):
    """Per GPU (`gpu_memory_gib`) and tensor-parallel (`model_memory_gib`): the whole card, its
    grant NVML's figure; half the named size is half the card (of what NVML reports)."""
    ledger = Ledger()
    ledger.append(one_card_node(model.name, model.reported_mib),
                  claim("whole", gpus=1, gpu_memory_gib=model.memory_gib, models=[model.name]))
    [grant] = placed(ledger, 1.0)["whole"].grants
    assert (grant.milli, grant.memory_mib) == (1000, model.reported_mib)
    ledger.append(ev.ClaimReleased(claim_id="whole"),
                  claim("tp", model_memory_gib=model.memory_gib, models=[model.name]),
                  claim("half", gpus=1, gpu_memory_gib=model.memory_gib / 2, models=[model.name]))
    decided = placed(ledger, 2.0)
    assert [len(decided["tp"].grants)] == [1] and "half" not in decided  # the card is the tensor-parallel claim's
    ledger.append(ev.ClaimReleased(claim_id="tp"))
    [half] = placed(ledger, 3.0)["half"].grants
    assert (half.milli, half.memory_mib) == (500, model.reported_mib // 2)


def discovered_as(fleet_spec: str, product: str, memory_mib: int, node: str):
    """The cards the node agent discovers on a fake NVML whose GPUs report `product` and `memory_mib`."""
    nvml = FakeNvml.from_node_spec(parse_fleet(fleet_spec)[0])
    for gpu in nvml.gpus:
        gpu.name, gpu.memory_mib = product, memory_mib
    with nvml_session(nvml):
        return discover(nvml, node).infos()


def test_an_h100_nvl_is_its_own_94_gb_model_and_takes_a_claim_for_90_gib():
    cards = discovered_as("1xH100x2", "NVIDIA H100 NVL", 95830, node="nvl")
    assert {(c.model, c.memory_mib) for c in cards} == {("H100NVL", 95830)}
    ledger = Ledger()
    ledger.append(ev.NodeRegistered(node="nvl", devices=cards, cpu_milli=64000, memory_mib=1 << 19, cuda_version="12.8"),
                  claim("big", gpus=1, gpu_memory_gib=90, models=["H100NVL"]),
                  claim("group", gpus=1, gpu_groups=["ADA_80_PRO"]))  # an H100 variant, as the seed's group says
    assert set(placed(ledger, 1.0)) == {"big", "group"}


def test_an_a100_40gb_is_not_the_80_gb_a100():
    cards = discovered_as("1xA100x2", "NVIDIA A100-PCIE-40GB", 40960, node="a40g")
    assert {(c.model, c.memory_mib) for c in cards} == {("A100M40", 40960)}
    ledger = Ledger()
    ledger.append(ev.NodeRegistered(node="a40g", devices=cards, cpu_milli=64000, memory_mib=1 << 19, cuda_version="12.8"),
                  claim("sixty", gpus=1, gpu_memory_gib=60, models=["A100"]),
                  claim("forty", gpus=1, gpu_memory_gib=40, models=["A100M40"]))
    assert set(placed(ledger, 1.0)) == {"forty"}
    assert ledger.state.claims["sixty"].reasons[0].code == "never-satisfiable"


def test_a_product_naming_another_size_is_not_taken_for_the_catalogues_model():
    assert model_for_product("NVIDIA A100 40GB SXM5") is None  # not the 80 GB A100
    assert model_for_product("NVIDIA A100 80GB SXM") is MODELS["A100"]
    assert model_for_product("NVIDIA T4") is MODELS["T4"]  # no size named: by the short name
