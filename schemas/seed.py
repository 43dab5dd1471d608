"""The serverless seed's spelling (seed 000, RunPod-style) of a claim and of an endpoint.

Clients written from the seed send camelCase names and its dual fields: `gpus` is a list of GPU
groups (our `gpu_groups`), `gpuIds` the same as one comma-separated string, `cudaVersions` a list
and `allowedCudaVersions` the same as a string, `workersMin`, `workersMax`, `scalerType`,
`scalerValue`, `imageName`, `gpuCount` (GPUs per worker; our `gpus` count). The seed Structs below
are generated from ClaimSpec and EndpointSpec, field for field (same Python names, same types and
bounds, only the wire names differ), so every rule and bound of the canonical spelling holds in
this one too, and the JSON Schema of both comes from the same annotations.

Dual fields, as the seed's `_sync_input_fields_gpu`: the list wins when both are given; a string
alone is split on commas into the list. Replies give both (`to_seed_endpoint`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from schemas.catalogue import CUDA_VERSIONS, GROUP_CHOICES
from schemas.types import ClaimSpec, EndpointSpec

# Python name -> the seed's wire name, where it is not plain camelCase of the Python name
_CLAIM_NAMES = {"gpus": "gpuCount", "gpu_groups": "gpus", "cuda_versions": "cudaVersions"}
_ENDPOINT_NAMES = {"gpu_groups": "gpus", "cuda_versions": "cudaVersions", "gpus_per_worker": "gpuCount",
                   "idle_timeout_s": "idleTimeout", "image": "imageName"}
_ENDPOINT_DEFAULTS = {"namespace": "default"}  # the seed has no namespaces
SEED_WIRE_OF = {"gpu_groups": "gpus", "cuda_versions": "cudaVersions"}  # the lists of the dual fields


def _comma_list(choices: tuple[str, ...], what: str) -> Any:
    item = "|".join(re.escape(c) for c in choices)
    # JSON's own blanks around the commas, spelt out: `\s` is not the same set in every engine.
    # An entry may be empty or blank ("AMPERE_80, ADA_80_PRO," or "A,,B"): the seed's
    # `_sync_input_fields_gpu` keeps only `v.strip()` entries that are not empty, so we do too.
    space = r"[ \t\n\r]*"
    pattern = rf"^{space}({item})?{space}(,{space}({item})?{space})*(?!\n)$"
    return Annotated[str, msgspec.Meta(pattern=pattern, max_length=1024,
                                       description=f"comma-separated {what} (the seed's API form)")]


GpuIds = _comma_list(GROUP_CHOICES, "GPU groups")
AllowedCudaVersions = _comma_list(CUDA_VERSIONS, "CUDA versions")
_DUALS = (("gpu_ids", "gpuIds", GpuIds, "gpu_groups"),
          ("allowed_cuda_versions", "allowedCudaVersions", AllowedCudaVersions, "cuda_versions"))


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _seed_struct(name: str, canonical: type, names: dict[str, str], defaults: dict[str, Any]) -> type:
    fields = []
    for f in msgspec.structs.fields(canonical):
        wire = names.get(f.name, camel(f.name))
        if f.name in defaults:
            default = msgspec.field(default=defaults[f.name], name=wire)
        elif f.required:
            default = msgspec.field(name=wire)
        elif f.default_factory is not msgspec.NODEFAULT:
            default = msgspec.field(default_factory=f.default_factory, name=wire)
        else:
            default = msgspec.field(default=f.default, name=wire)
        fields.append((f.name, f.type, default))
    fields += [(py, annotation, msgspec.field(default="", name=wire)) for py, wire, annotation, _ in _DUALS]
    return msgspec.defstruct(name, fields, frozen=True, omit_defaults=True, forbid_unknown_fields=True,
                             kw_only=True, module=__name__)


SeedClaimSpec = _seed_struct("SeedClaimSpec", ClaimSpec, _CLAIM_NAMES, {})
SeedClaimSpec.__doc__ = "A claim in the serverless seed's spelling (camelCase, gpus = GPU groups)."
SeedEndpointSpec = _seed_struct("SeedEndpointSpec", EndpointSpec, _ENDPOINT_NAMES, _ENDPOINT_DEFAULTS)
SeedEndpointSpec.__doc__ = "An endpoint in the serverless seed's spelling (ServerlessEndpoint)."

CLAIM_WIRE = {f.name: f.encode_name for f in msgspec.structs.fields(SeedClaimSpec)}
ENDPOINT_WIRE = {f.name: f.encode_name for f in msgspec.structs.fields(SeedEndpointSpec)}
# keys that only the seed's spelling has: one of them in an object says which spelling it is
_SNAKE_ENDPOINT = {f.encode_name for f in msgspec.structs.fields(EndpointSpec)}
SEED_ENDPOINT_KEYS = frozenset(ENDPOINT_WIRE.values()) - _SNAKE_ENDPOINT


def is_seed_claim(raw: Any) -> bool:
    """A claim object in the seed's spelling: it has `claimId` (the canonical one has `claim_id`)."""
    return isinstance(raw, dict) and "claimId" in raw and "claim_id" not in raw


def is_seed_endpoint(raw: Any) -> bool:
    """An endpoint object in the seed's spelling: a key only that spelling has, or `gpus`."""
    return isinstance(raw, dict) and (bool(SEED_ENDPOINT_KEYS & raw.keys()) or "gpus" in raw)


def _synced(seed: Any, given: Any) -> dict[str, Any]:
    """The canonical fields of a seed Struct: each dual string folded into its list. `given` are
    the keys the client wrote: a list it wrote wins (the seed's rule); a string alone fills it."""
    values = msgspec.structs.asdict(seed)
    for py, _, _, target in _DUALS:
        text = values.pop(py)
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if parts and SEED_WIRE_OF[target] not in given:  # only commas and blanks: as if left out
            values[target] = parts
    return values


def from_seed_claim(seed: Any, given: Any) -> ClaimSpec:
    return ClaimSpec(**_synced(seed, given))


def from_seed_endpoint(seed: Any, given: Any) -> EndpointSpec:
    return EndpointSpec(**_synced(seed, given))


def to_seed_endpoint(spec: EndpointSpec) -> dict[str, Any]:
    """An endpoint as the seed's API answers: camelCase, both dual fields filled, defaults written."""
    out = {ENDPOINT_WIRE[f.name]: getattr(spec, f.name) for f in msgspec.structs.fields(EndpointSpec)}
    out["gpuIds"] = ",".join(spec.gpu_groups)
    out["allowedCudaVersions"] = ",".join(spec.cuda_versions)
    return msgspec.to_builtins(out)


# --- errors in the seed's words ------------------------------------------------------------------

_ENUM = re.compile(r"Invalid enum value '([^']*)' - at `\$\.((?:\w+\.)?(?:gpus|cudaVersions))\[(\d+)\]`")
_PATTERN_AT = re.compile(r"at `\$\.((?:\w+\.)?(gpuIds|allowedCudaVersions))`")
_KIND = {"gpus": "GpuGroup", "cudaVersions": "CudaVersion", "gpuIds": "GpuGroup",
         "allowedCudaVersions": "CudaVersion"}
_CHOICES = {"GpuGroup": GROUP_CHOICES, "CudaVersion": CUDA_VERSIONS}


def seed_message(error: Exception, raw: Any) -> str | None:
    """The seed's own words for a bad GPU group or CUDA version (`invalid_gpu is not a valid
    GpuGroup`), for a msgspec error on a seed-spelled object; None for any other error."""
    text = str(error)
    enum = _ENUM.search(text)
    if enum:
        kind = _KIND[enum.group(2).rsplit(".", 1)[-1]]
        return f"{enum.group(1)} is not a valid {kind} - at `$.{enum.group(2)}[{enum.group(3)}]`"
    pattern = _PATTERN_AT.search(text)
    if pattern and isinstance(raw, dict):
        path, name = pattern.group(1), pattern.group(2)
        value = raw
        for key in path.split("."):
            value = value.get(key, "") if isinstance(value, dict) else ""
        kind = _KIND[name]
        # entries as the pattern reads them (JSON's blanks around them); empty ones are allowed
        entries = (p.strip(" \t\n\r") for p in str(value).split(","))
        bad = [e for e in entries if e and e not in _CHOICES[kind]]
        if bad:
            return f"{bad[0]!r} is not a valid {kind} - at `$.{path}`" if bad[0] != bad[0].strip() \
                else f"{bad[0]} is not a valid {kind} - at `$.{path}`"
    return None


def seed_field(field: str, wire: dict[str, str]) -> str:
    """A canonical field path (`gpu_groups[0]`) in the seed's names (`gpus[0]`)."""
    head, bracket, rest = field.partition("[")
    return wire.get(head, head) + bracket + rest


def convert_seed(raw: Any, struct: type, path: str = "") -> Any:
    """A seed Struct from decoded JSON (integers written as 2.0 accepted, as JSON Schema's
    `integer` allows); a msgspec.ValidationError in the seed's words, at `$.<path>.<field>`."""
    try:
        return msgspec.convert(_integral(raw), struct)
    except msgspec.ValidationError as err:
        text = str(err)
        if path and "`$" in text:
            text = text.replace("`$.", f"`$.{path}.").replace("`$`", f"`$.{path}`")
        elif path:  # an error about the object itself (an unknown field): say which object
            text += f" - at `$.{path}`"
        wrapped = msgspec.ValidationError(text)
        nested = {path: raw} if path else raw
        raise msgspec.ValidationError(seed_message(wrapped, nested) or text) from err


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value
