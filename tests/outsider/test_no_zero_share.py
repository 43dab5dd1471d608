"""A share of a GPU is at least one thousandth of it (session 32). A claim of `gpu_memory_gib:
1e-12` (or `gpu_tflops`, or a tiny `model_memory_gib`; the schema allows any size > 0) was granted
a share of 0 milli, on a card another claim held whole: the fold took it (0 fits in 0 free), its
workload got that card in CUDA_VISIBLE_DEVICES, and any number of such claims could join it, each
outside capacity and quota ("one GPU granted twice"); on a free card, a 0-milli holder kept every
whole-GPU claim off it. Decided on the pure core, as the allocator decides."""

from __future__ import annotations

import pytest

from schemas import events as ev
from tests.fleet import Ledger, claim, h100_node


@pytest.mark.parametrize("fields", [{"gpus": 1, "gpu_memory_gib": 1e-12}, {"gpus": 1, "gpu_tflops": 1e-12},
                                    {"gpus": 0, "model_memory_gib": 1e-12}])
def test_a_tiny_share_never_lands_on_a_card_held_whole(fields):
    ledger = Ledger()
    ledger.append(h100_node("h0"))
    ledger.append(*[claim(f"whole-{i}", gpus=1, models=["H100"]) for i in range(8)])
    assert all(isinstance(d, ev.ClaimAllocated) for d in ledger.decide(1.0))
    ledger.append(*[claim(f"tiny-{i}", models=["H100"], at=2.0, **fields) for i in range(3)])
    decided = ledger.decide(2.0)
    assert decided and all(isinstance(d, ev.ClaimPending) for d in decided), decided


def test_a_tiny_share_takes_one_milli_of_a_free_card():
    ledger = Ledger()
    ledger.append(h100_node("h0", gpus=1, islands=1))
    ledger.append(claim("tiny", gpus=1, gpu_memory_gib=1e-12, models=["H100"]))
    [d] = ledger.decide(1.0)
    assert isinstance(d, ev.ClaimAllocated) and [g.milli for g in d.grants] == [1], d
