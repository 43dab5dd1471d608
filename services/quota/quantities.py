"""Quantities as people write them (Kubernetes style), parsed to the units the core counts in.

VRAM: a number with a unit, `512Mi`, `16Gi`, `1Ti` (binary) or `16G` (decimal), to whole MiB.
A bare number is refused for VRAM: Kubernetes would read `16` as 16 bytes, which is never what
anyone means. TFLOPS: a plain number, `100`, `2.5` or `"1000"`. Errors name the field.
"""

from __future__ import annotations

import math
import re

MIB = 1024 * 1024

_BINARY = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB, "Ti": 1024**2 * MIB, "Pi": 1024**3 * MIB}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_VRAM = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([KMGTP]i|[kKMGTP])\s*$")
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*$")
UNLIMITED = ("unlimited", "none", "inf")
# The largest amounts a quota may name: far above any fleet (a million H100s hold about 80 Pi and
# 1e9 TFLOPS), and low enough that sums over a cohort tree stay exact and finite and every state
# that holds them can be written as a snapshot (msgpack integers end at 2^64). Without a bound,
# '99999999999999999999Ti' was stored as it came and the allocator's snapshot of it failed.
MAX_VRAM_MIB = 1024**4  # 1024Pi
MAX_TFLOPS = 1e12


class QuantityError(ValueError):
    """Bad input for one field: `field` names it, the message says what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_vram_mib(value: object, field: str) -> int:
    """'16Gi' -> 16384 (MiB). Decimal units round to the nearest MiB; below 1 MiB is refused."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise QuantityError(field, f"must be a quantity with a unit like '16Gi' or '512Mi', got {value!r}")
    match = _VRAM.match(value)
    if match is None:
        if value.strip().startswith("-"):
            raise QuantityError(field, f"must not be negative, got {value!r}")
        if _NUMBER.match(value):
            raise QuantityError(field, f"{value!r} has no unit: write e.g. '{value.strip()}Gi' or '{value.strip()}Mi'")
        raise QuantityError(field, f"{value!r} is not a quantity: use e.g. '100Gi', '512Mi', '1Ti'")
    number, unit = float(match.group(1)), match.group(2)
    total_bytes = number * (_BINARY.get(unit) or _DECIMAL[unit])
    if total_bytes > MAX_VRAM_MIB * MIB:  # also 400 nines, which float() makes infinite
        raise QuantityError(field, f"{value!r} is above the largest amount a quota may name, 1024Pi")
    mib = round(total_bytes / MIB)
    if number > 0 and mib == 0:
        raise QuantityError(field, f"{value!r} is below 1Mi, the smallest amount counted")
    return mib


def parse_tflops(value: object, field: str) -> float:
    """'1000', 1000 or 2.5 -> a non-negative finite float."""
    if isinstance(value, bool):
        raise QuantityError(field, f"must be a number of TFLOPS, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _NUMBER.match(value):
        number = float(value)
    elif isinstance(value, str) and value.strip().startswith("-"):
        raise QuantityError(field, f"must not be negative, got {value!r}")
    elif isinstance(value, str):
        raise QuantityError(field, f"{value!r} is not a number of TFLOPS (e.g. '100' or '2.5')")
    else:
        raise QuantityError(field, f"must be a number of TFLOPS, got {value!r}")
    if not math.isfinite(number):
        raise QuantityError(field, f"must be finite, got {value!r}")
    if number < 0:
        raise QuantityError(field, f"must not be negative, got {value!r}")
    if number > MAX_TFLOPS:
        raise QuantityError(field, f"{value!r} is above the largest amount a quota may name, {MAX_TFLOPS:.0e} TFLOPS")
    return number


def is_unlimited(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in UNLIMITED


def optional_vram(value: object, field: str) -> int | None:
    return None if value is None else parse_vram_mib(value, field)


def optional_tflops(value: object, field: str) -> float | None:
    return None if value is None else parse_tflops(value, field)
