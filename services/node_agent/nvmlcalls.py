"""Small helpers around NVML calls that work the same on real pynvml, old pynvml and the fake.

Real NVML answers NotSupported for whole families of calls on some cards (utilization on MIG,
NVLink on PCIe cards, page retirement on Hopper); an old pynvml may lack a function entirely or
return bytes where a new one returns str. None of that may stop discovery: it becomes a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024

_MISSING = object()


@dataclass
class Notes:
    """What NVML could not tell us, grouped by call: 'nvmlDeviceGetRemappedRows: GPU 0, GPU 1'."""

    unsupported: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def not_supported(self, call: str, where: str) -> None:
        places = self.unsupported.setdefault(call, [])
        if where not in places:
            places.append(where)

    def error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    def lines(self) -> list[str]:
        out = [f"{call} not supported: {', '.join(places)}" for call, places in self.unsupported.items()]
        return out + self.errors


def text(value: Any) -> str:
    """NVML strings: bytes on pynvml < 11.5 and in ctypes struct fields, str on newer ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").strip("\x00").strip()
    return str(value).strip()


def is_not_supported(nvml: Any, err: BaseException) -> bool:
    codes = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)}
    return getattr(err, "value", None) in codes


def optional(nvml: Any, notes: Notes, where: str, name: str, *args: Any, default: Any = None) -> Any:
    """Call `nvml.<name>(*args)`; NotSupported or a missing function is noted and gives `default`.
    Any other NVML error propagates: the caller decides whether it means a faulted device."""
    fn: Callable | object = getattr(nvml, name, _MISSING)
    if fn is _MISSING:
        notes.not_supported(name, "this pynvml")
        return default
    try:
        return fn(*args)
    except nvml.NVMLError as err:
        if is_not_supported(nvml, err):
            notes.not_supported(name, where)
            return default
        raise


def error_text(err: BaseException) -> str:
    try:
        return f"{type(err).__name__}: {err}"
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        return f"{type(err).__name__} (code {getattr(err, 'value', '?')})"


def canonical_bus_id(bus_id: Any) -> str:
    """'00000000:18:00.0', b'0000:18:00.0' -> '0000:18:00.0' so local and remote ids compare."""
    raw = text(bus_id).lower()
    try:
        domain, bus, rest = raw.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"
    except ValueError:
        return raw


def cuda_version_text(version: int) -> str:
    """NVML's 12080 -> '12.8'."""
    return f"{version // 1000}.{(version % 1000) // 10}"
