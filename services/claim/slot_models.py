"""The models an operator offers as slots (GPULEDGER_MODELS, a YAML file), each with its memory
need: vLLM's as configured, Ollama's estimated from its GGUF file at load (services/claim/
model_memory.py), for `max_concurrency` parallel requests of `context_length` tokens.

```yaml
models:
  - {name: llama3-8b, runtime: vllm, memory_gib: 20, max_concurrency: 8, head_count: 32}
  - {name: llama3-ollama, runtime: ollama, file: /models/llama3.gguf, context_length: 8192, max_concurrency: 4}
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from services.claim.model_memory import ModelFileError, estimate_ollama, read_gguf
from services.claim.slot_core import RUNTIMES, ModelSpec


class ModelEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    runtime: str
    memory_gib: Annotated[float, msgspec.Meta(ge=0)] = 0.0  # vLLM: required
    file: str = ""  # Ollama: the GGUF file (relative to the models file)
    context_length: Annotated[int, msgspec.Meta(ge=0)] = 0  # Ollama: 0 = the model's own (<= 8192)
    max_concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    head_count: Annotated[int, msgspec.Meta(ge=0)] = 0  # vLLM: tensor parallel must divide it


class ModelsFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    models: list[ModelEntry] = []


class ModelsInvalid(ValueError):
    pass


def load_models(path: str) -> dict[str, ModelSpec]:
    """Every model of the file by name; a clear error names the file, the entry and the field."""
    import yaml

    if not path:
        return {}
    try:
        entries = msgspec.convert(yaml.safe_load(Path(path).read_text()) or {}, ModelsFile).models
    except OSError as err:
        raise ModelsInvalid(f"{path}: cannot read ({err.strerror})") from err
    except (yaml.YAMLError, msgspec.ValidationError) as err:
        raise ModelsInvalid(f"{path}: {err}") from err
    models: dict[str, ModelSpec] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: models[{i}]"
        if entry.name in models:
            raise ModelsInvalid(f"{where}.name: {entry.name!r} is listed twice")
        models[entry.name] = model_spec(entry, Path(path).parent, where)
    return models


def model_spec(entry: ModelEntry, base: Path, where: str) -> ModelSpec:
    if entry.runtime not in RUNTIMES:
        raise ModelsInvalid(f"{where}.runtime: {entry.runtime!r} is not one of {', '.join(RUNTIMES)}")
    if entry.runtime == "vllm":
        if entry.memory_gib <= 0:
            raise ModelsInvalid(f"{where}.memory_gib: a vLLM model needs the memory the operator runs it with")
        return ModelSpec(entry.name, "vllm", entry.memory_gib, entry.max_concurrency, entry.head_count)
    if not entry.file:
        raise ModelsInvalid(f"{where}.file: an Ollama model needs its GGUF file (memory is estimated from it)")
    try:
        meta = read_gguf(base / entry.file)
    except ModelFileError as err:
        raise ModelsInvalid(f"{where}.file: {err}") from err
    estimate = estimate_ollama(meta, entry.context_length, entry.max_concurrency)
    return ModelSpec(entry.name, "ollama", round(estimate.total_gib, 3), entry.max_concurrency, meta.head_count)
