"""How much GPU memory a model needs, by runtime (Helix seed 002: `model_allocation.go`).

- vLLM: what the operator configured (`ModelSpec.memory_gib`): vLLM preallocates its share of the
  card, so only the operator knows the number they run it with.
- Ollama: estimated from the model file's GGUF header, as Ollama's `llm/memory.go` does: the
  weights (the tensors' bytes), the KV cache for `context_length x parallel` tokens, the compute
  graph of one batch, and a fixed CUDA overhead per GPU. Reading the header (`read_gguf`) is the
  only I/O here; `estimate_ollama` is pure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

GIB = 2**30
CUDA_OVERHEAD = 457 * 2**20  # Ollama's per-GPU minimum (CUDA context and cuBLAS workspace)
BATCH = 512  # Ollama's num_batch
KV_BYTES = {"f16": 2.0, "q8_0": 1.0625, "q4_0": 0.5625}  # per element, as Ollama's kvCacheBytesPerElement


class GgufModel(NamedTuple):
    """What the header of a GGUF file says about a model."""

    architecture: str
    name: str
    parameters: int  # elements of every tensor
    weights_bytes: int  # bytes of every tensor (as quantised)
    quantisation: str  # general.file_type by name (MOSTLY_Q4_K_M, ...), or the commonest tensor type
    context_length: int  # the context it was trained for
    block_count: int
    embedding_length: int
    head_count: int
    head_count_kv: int
    vocab_size: int
    key_length: int  # per head
    value_length: int


class MemoryEstimate(NamedTuple):
    weights: int
    kv_cache: int
    graph: int
    overhead: int
    context_length: int  # per request
    parallel: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.graph + self.overhead

    @property
    def total_gib(self) -> float:
        return self.total / GIB


class ModelFileError(ValueError):
    pass


def read_gguf(path: str | Path) -> GgufModel:
    """The model's metadata from a GGUF file's header and tensor table (nothing else is read)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as err:
        raise ModelFileError(f"{path}: not a readable GGUF file ({err})") from err
    fields = {name: field.contents() for name, field in reader.fields.items()}
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFileError(f"{path}: general.architecture is missing from the GGUF header")

    def number(key: str, default: int = 0) -> int:
        value = fields.get(f"{arch}.{key}", default)
        return int(value[0] if isinstance(value, list) and value else value or default)

    heads = number("attention.head_count")
    embedding = number("embedding_length")
    head_dim = embedding // heads if heads else 0
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = number("vocab_size") or (len(tokens) if isinstance(tokens, list) else 0)
    return GgufModel(
        architecture=arch, name=str(fields.get("general.name", Path(path).stem)),
        parameters=sum(int(t.n_elements) for t in reader.tensors),
        weights_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        quantisation=_quantisation(fields.get("general.file_type"), reader.tensors),
        context_length=number("context_length"), block_count=number("block_count"),
        embedding_length=embedding, head_count=heads, head_count_kv=number("attention.head_count_kv", heads),
        vocab_size=vocab or _vocab_from_tensors(reader.tensors),
        key_length=number("attention.key_length", head_dim), value_length=number("attention.value_length", head_dim))


def _quantisation(file_type, tensors) -> str:
    import gguf

    if isinstance(file_type, int):
        try:
            return gguf.LlamaFileType(file_type).name
        except ValueError:
            pass
    kinds: dict[str, int] = {}
    for t in tensors:
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + int(t.n_elements)
    return max(kinds, key=kinds.get) if kinds else "unknown"


def _vocab_from_tensors(tensors) -> int:
    for t in tensors:
        if t.name == "token_embd.weight":
            return int(max(t.shape))
    return 0


def estimate_ollama(model: GgufModel, context_length: int = 0, parallel: int = 1, gpus: int = 1,
                    kv_cache_type: str = "f16") -> MemoryEstimate:
    """GPU memory to serve `parallel` requests of `context_length` tokens each (0: the model's
    own context, capped at 8192 as Ollama's default num_ctx grows to), fully offloaded on `gpus`."""
    if parallel < 1 or gpus < 1 or context_length < 0:
        raise ValueError("parallel and gpus must be at least 1, context_length 0 or more")
    if kv_cache_type not in KV_BYTES:
        raise ValueError(f"kv_cache_type {kv_cache_type!r}: one of {', '.join(KV_BYTES)}")
    ctx = context_length or min(model.context_length or 2048, 8192)
    tokens = ctx * parallel  # Ollama multiplies num_ctx by num_parallel
    kv = math.ceil(tokens * model.block_count * (model.key_length + model.value_length)
                   * model.head_count_kv * KV_BYTES[kv_cache_type])
    # llm/memory.go, full offload: the larger of the attention and the output graphs of a batch
    batch = min(BATCH, tokens)
    graph = max(4 * batch * (1 + 4 * model.embedding_length + tokens * (1 + model.head_count)),
                4 * batch * (model.embedding_length + model.vocab_size))
    return MemoryEstimate(weights=model.weights_bytes, kv_cache=kv, graph=graph,
                          overhead=CUDA_OVERHEAD * gpus, context_length=ctx, parallel=parallel)
