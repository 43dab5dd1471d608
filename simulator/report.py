"""Text tables and JSON for simulation results."""

from __future__ import annotations

from simulator.runner import LEVELS, PUBLISHED, Summary


def _ms(v: dict | None) -> str:
    return "-" if not v or v.get("n", 0) == 0 else f"{v['mean']:.2f} ± {v['sd']:.2f}"


def _published(policy: str, which: int, on_published_trace: bool) -> str:
    pub = PUBLISHED.get(policy) if on_published_trace else None
    return f"{pub[which][0]:.2f} ± {pub[which][1]:.2f}" if pub else "-"


def table(summaries: list[Summary], on_published_trace: bool = True) -> str:
    """The headline table: Unalloc(100)/(130) beside the published numbers (on the trace they
    were published for; '-' on any other), frag, speed."""
    head = ("| policy | Unalloc(100) | published | Unalloc(130) | published | frag % GPUs @100 "
            "| ms/decision |")
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in summaries:
        lines.append(f"| {s.policy} | {_ms(s.unalloc.get(100))} | {_published(s.policy, 0, on_published_trace)} "
                     f"| {_ms(s.unalloc.get(130))} | {_published(s.policy, 1, on_published_trace)} "
                     f"| {_ms(s.frag.get(100))} | {s.ms_per_decision:.3f} |")
    return "\n".join(lines)


def curves(summaries: list[Summary]) -> str:
    lines = ["| unalloc % at arrived % | " + " | ".join(str(x) for x in LEVELS) + " |",
             "| --- " * (len(LEVELS) + 1) + "|"]
    for s in summaries:
        cells = [f"{s.unalloc[x]['mean']:.2f}" if x in s.unalloc else "-" for x in LEVELS]
        lines.append(f"| {s.policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(summaries: list[Summary]) -> str:
    shapes = sorted({k for s in summaries for k in s.failed})
    lines = ["| failed pods per seed (to 130 %) | " + " | ".join(shapes) + " |",
             "| --- " * (len(shapes) + 1) + "|"]
    for s in summaries:
        lines.append(f"| {s.policy} | " + " | ".join(f"{s.failed.get(k, 0):.1f}" for k in shapes) + " |")
    return "\n".join(lines)


def to_json(summaries: list[Summary], on_published_trace: bool = True) -> dict:
    return {s.policy: s.to_json(on_published_trace) for s in summaries}
