"""Issue 11 item 5 (Helix seed 002): memory by runtime (Ollama from a GGUF file written here with the
`gguf` package; vLLM as configured), warm-slot reuse with concurrency and model/runtime/LoRA
matching, GPU counts the fleet can host with memory split evenly, stale slots."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from schemas import events as ev
from schemas import subjects

from services.claim.model_memory import CUDA_OVERHEAD, ModelFileError, estimate_ollama, read_gguf
from services.claim.slot_book import SlotBook
from services.claim.slot_core import (ModelSpec, Slot, SlotKey, gpu_counts, plan_slot,
                                      stale_slots, warm_slot)


def write_model(path, blocks=2, embedding=64, heads=4, heads_kv=2, context=4096, vocab=100,
                file_type=gguf.LlamaFileType.MOSTLY_Q8_0):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(blocks)
    writer.add_context_length(context)
    writer.add_embedding_length(embedding)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads_kv)
    writer.add_feed_forward_length(2 * embedding)
    writer.add_file_type(file_type)
    writer.add_tensor("token_embd.weight", np.zeros((vocab, embedding), dtype=np.float16))
    for b in range(blocks):
        writer.add_tensor(f"blk.{b}.attn_q.weight", np.zeros((embedding, embedding), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((vocab, embedding), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_gguf_header_gives_parameters_quantisation_and_context(tmp_path):
    model = read_gguf(write_model(tmp_path / "tiny.gguf"))
    assert model.architecture == "llama" and model.name == "tiny-llama"
    assert model.parameters == 2 * 100 * 64 + 2 * 64 * 64
    assert model.weights_bytes == 2 * 100 * 64 * 2 + 2 * 64 * 64 * 4
    assert model.quantisation == "MOSTLY_Q8_0" and model.context_length == 4096
    assert (model.block_count, model.head_count, model.head_count_kv, model.vocab_size) == (2, 4, 2, 100)
    assert model.key_length == model.value_length == 16


def test_ollama_memory_grows_with_context_and_concurrency_as_ollama_counts_it(tmp_path):
    model = read_gguf(write_model(tmp_path / "tiny.gguf"))
    one = estimate_ollama(model, context_length=2048, parallel=1)
    # KV cache: tokens x blocks x (key + value length) x kv heads x 2 bytes (f16)
    assert one.kv_cache == 2048 * 2 * (16 + 16) * 2 * 2
    four = estimate_ollama(model, context_length=2048, parallel=4)
    assert four.kv_cache == 4 * one.kv_cache and four.graph > one.graph
    assert estimate_ollama(model, context_length=2048, parallel=1, kv_cache_type="q8_0").kv_cache < one.kv_cache
    assert estimate_ollama(model).context_length == 4096  # the model's own context by default
    two_gpus = estimate_ollama(model, context_length=2048, gpus=2)
    assert two_gpus.total - one.total == CUDA_OVERHEAD
    assert one.total == one.weights + one.kv_cache + one.graph + one.overhead


def test_a_file_that_is_not_gguf_is_refused_naming_it(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelFileError) as err:
        read_gguf(bad)
    assert "model.gguf" in str(err.value)


def slot(slot_id, model="llama3", runtime="ollama", lora="", active=0, concurrency=2, at=0.0):
    return Slot(slot_id, SlotKey(model, runtime, lora), 1, 10.0, concurrency, at, active)


def test_a_request_goes_to_a_warm_slot_of_the_same_model_runtime_and_adapter_with_room():
    slots = [slot("other-model", model="mistral"), slot("other-runtime", runtime="vllm"),
             slot("other-lora", lora="adapters/sql"), slot("full", active=2, at=9.0),
             slot("busy", active=1, at=8.0), slot("idle-old", at=1.0), slot("idle-new", at=5.0)]
    assert warm_slot(slots, SlotKey("llama3", "ollama")).slot_id == "idle-new"
    assert warm_slot(slots, SlotKey("llama3", "ollama", "adapters/sql")).slot_id == "other-lora"
    assert warm_slot(slots, SlotKey("llama3", "ollama", "adapters/chat")) is None


def test_the_book_counts_requests_from_the_log_and_a_full_slot_takes_no_more():
    book = SlotBook()
    book.on_event(5, subjects.slot("s"), ev.SlotRequestStarted(slot_id="s", request_id="r1", at=1.0))
    book.on_event(6, subjects.slot("s"), ev.SlotRequestStarted(slot_id="s", request_id="r2", at=2.0))
    s = slot("s", concurrency=2, active=book.active("s"))
    assert s.free == 0 and warm_slot([s], s.key) is None and book.fence["s"] == 6
    assert book.oldest("s") == "r1" and book.overdue(now=61.5, timeout_s=60.0) == [("s", "r1")]
    book.on_event(9, subjects.slot("s"), ev.SlotRequestFinished(slot_id="s", request_id="r1", at=4.0))
    assert book.active("s") == 1 and book.last_activity["s"] == 4.0 and book.fence["s"] == 9
    book.on_event(10, subjects.claim("x"), ev.ClaimReleased(claim_id="x", at=5.0))  # not a slot's
    assert book.fence == {"s": 9}
    book.forget("s")
    assert book.active("s") == 0 and book.oldest("s") is None


def test_stale_slots_are_the_idle_ones_longest_idle_first():
    slots = [slot("busy", active=1, at=0.0), slot("old", at=10.0), slot("older", at=5.0), slot("fresh", at=95.0)]
    assert [s.slot_id for s in stale_slots(slots, now=100.0, stale_after_s=60.0)] == ["older", "old"]


def test_gpu_counts_per_runtime():
    assert gpu_counts("ollama", 8) == [1, 2, 3, 4, 5, 6, 7, 8]  # layers split over any number
    assert gpu_counts("vllm", 8) == [1, 2, 4, 8]  # heads unknown: powers of two
    assert gpu_counts("vllm", 8, head_count=48) == [1, 2, 3, 4, 6, 8]  # any divisor of the heads
    with pytest.raises(ValueError, match="runtime"):
        gpu_counts("tgi", 8)


def test_a_slot_gets_the_fewest_gpus_whose_even_share_fits_and_any_count_the_fleet_can_host():
    fleet = {"H100": (80.0, 8), "L4": (24.0, 4)}
    small = plan_slot(ModelSpec("llama3-8b", "vllm", 20.0), fleet)
    assert small.gpus == 1 and small.models == ("H100", "L4")
    ollama = plan_slot(ModelSpec("llama3-70b", "ollama", 200.0), fleet)
    assert (ollama.gpus, ollama.memory_per_gpu_gib, ollama.models) == (3, 66.667, ("H100",))
    vllm = plan_slot(ModelSpec("llama3-70b", "vllm", 200.0, head_count=64), fleet)
    assert (vllm.gpus, vllm.memory_per_gpu_gib) == (4, 50.0)  # 3 does not divide 64 heads
    assert plan_slot(ModelSpec("huge", "ollama", 900.0), fleet) is None  # not on 8 x 80 GiB
    assert plan_slot(ModelSpec("any", "ollama", 1.0), {}) is None
