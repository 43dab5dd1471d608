"""A namespace's TFLOPs use is summed in integer milli-TFLOPs (`Usage.tflops_m`, each claim's
`Claim.tflops_m`); the float figures are derived. A snapshot written before those fields existed
restores them from the floats, so releases after a restart take back what was charged (pure)."""

from __future__ import annotations

import msgspec

import bench.decide as bench_decide
from ledger.snapshot import from_snapshot, to_snapshot
from schemas import events as ev


def _busy_state():
    bench = bench_decide.Bench(12, "gpuledger", seed=2)
    for _ in range(30):
        bench.step()
    assert bench.state.holding
    return bench


def _without_milli_fields(data: bytes) -> bytes:
    """The snapshot as the code before the milli fields wrote it."""
    raw = msgspec.msgpack.decode(data)
    for claim in raw["claims"]:
        claim.pop("tflops_m", None)
        claim.pop("limit_tflops_m", None)
    for usage in raw["usage"].values():
        usage.pop("tflops_m", None)
        usage.pop("limit_tflops_m", None)
    return msgspec.msgpack.encode(raw)


def _release_half(state) -> dict:
    """Release every other claim holding devices; the namespaces' use after."""
    for seq, claim_id in enumerate(list(state.holding)[::2], state.last_seq + 1):
        bench_decide.evolve(state, ev.ClaimReleased(claim_id=claim_id, at=99.0), seq)
    return {ns: (u.tflops, u.limit_tflops, u.tflops_m, u.limit_tflops_m) for ns, u in state.usage.items()}


def test_use_restored_from_an_older_snapshot_is_taken_back_by_releases():
    state = _busy_state().state
    used = {ns: (u.tflops, u.limit_tflops) for ns, u in state.usage.items()}
    assert any(t > 0 for t, _ in used.values())
    snapshots = (to_snapshot(state), _without_milli_fields(to_snapshot(state)))
    left = _release_half(state)
    assert any(t > 0 for t, *_ in left.values())
    for data in snapshots:
        restored = from_snapshot(data)
        assert {ns: (u.tflops, u.limit_tflops) for ns, u in restored.usage.items()} == used
        assert _release_half(restored) == left


def test_the_floats_are_the_milli_sums():
    state = _busy_state().state
    for usage in state.usage.values():
        assert usage.tflops == usage.tflops_m / 1000 and usage.limit_tflops == usage.limit_tflops_m / 1000
    for claim_id in state.holding:
        claim = state.claims[claim_id]
        assert claim.tflops_m == round(claim.tflops * 1000)
