"""Where a claim's latency goes inside the services: times they stamp on their own appends, for
`bench e2e --hops` (bench/e2e/hops.py), only when GPULEDGER_HOP_STAMPS=1 in their environment.

The log alone holds four stamps of a claim's path (the claim service's validation, the pass that
allocated it, the server's stored time of each message). The rest happens inside a process and
leaves no trace: when the intake message was stored, when it reached the claim service and when
its intake loop took it; when the allocator folded the claim; when its pass had decided. With
stamping on, the claim service's intake append and the allocator's decision batch carry those
times in one header (`Gpuledger-Hops`), a list per claim in the order of the events the message
holds. Off (the default), nothing is read or written: the header costs bytes in the log forever,
and a clock read per claim.

The value: `name=v1,v2,...;name=v` with unix seconds (a server's stored time in ns as it came).
"""

from __future__ import annotations

import os

HEADER = "Gpuledger-Hops"
ENV = "GPULEDGER_HOP_STAMPS"


def enabled(env: dict[str, str] | None = None) -> bool:
    """Whether this process stamps (read once by each service when it starts)."""
    return (os.environ if env is None else env).get(ENV, "") == "1"


def encode(fields: dict[str, list[float] | float]) -> str:
    """One header value from named stamps (a list per claim, or one for the whole message)."""
    parts = []
    for name, value in fields.items():
        values = value if isinstance(value, list) else [value]
        parts.append(name + "=" + ",".join(_number(v) for v in values))
    return ";".join(parts)


def decode(value: str) -> dict[str, list[float]]:
    """The named stamps of a header value; a malformed part is left out (a figure, not the run)."""
    found: dict[str, list[float]] = {}
    for part in value.split(";"):
        name, sep, numbers = part.partition("=")
        if not sep:
            continue
        try:
            found[name] = [float(n) for n in numbers.split(",")] if numbers else []
        except ValueError:
            continue
    return found


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.6f}"
