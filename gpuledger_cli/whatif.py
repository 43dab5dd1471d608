"""`gpuledger whatif`: re-run the real log's decisions under another policy or settings."""

from __future__ import annotations

import asyncio
from typing import Optional

import typer

from gpuledger_cli.client import NatsUrl, die, nats_url, open_log_or_die, print_json


async def _events(url: str, until_seq: Optional[int]) -> list:
    nc, log = await open_log_or_die(url)
    try:
        return [(s.seq, s.event) async for s in log.read(1, until_seq)]
    finally:
        await nc.close()


def register(app: typer.Typer) -> None:
    @app.command("whatif")
    def whatif(policy: str = typer.Option("gpuledger", "--policy", help="placement policy to try"),
               stale_after: float = typer.Option(600.0, "--stale-after", min=0, help="seconds idle before eviction"),
               starvation_after: float = typer.Option(300.0, "--starvation-after", min=0, help="seconds a claim waits "
                                                       "before it holds a node"),
               node_timeout: float = typer.Option(30.0, "--node-timeout", min=0, help="seconds of silence before a node "
                                                   "is lost"),
               release_unused_after: float = typer.Option(
                   1800.0, "--release-unused-after", min=0,
                   help="seconds an allocation may show no process before it is released (0: never)"),
               until_seq: Optional[int] = typer.Option(None, "--until-seq", min=1, help="stop at this sequence"),
               as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"), url: Optional[str] = NatsUrl) -> None:
        """Replay the log's claims, releases and hardware facts; at every recorded decision point
        let the allocator decide with these settings instead; compare with what happened."""
        from services.allocator.core.decide import DecideContext
        from services.allocator.core.scorers import POLICIES
        from services.allocator.whatif import compare

        if policy not in POLICIES:
            die(f"unknown policy {policy!r}; known: {', '.join(sorted(POLICIES))}")
        events = asyncio.run(_events(nats_url(url), until_seq))
        ctx = DecideContext(now=0.0, policy=policy, stale_after_s=stale_after,
                            starvation_after_s=starvation_after, node_timeout_s=node_timeout,
                            release_unused_after_s=release_unused_after)
        result = compare(events, ctx)
        if as_json:
            print_json(result)
            return
        typer.echo(f"{result['events']} events; what if policy={policy}:")
        for key in result["actual"]:
            typer.echo(f"  {key:>18}: actual {result['actual'][key]!s:>8}   what-if {result['what_if'][key]!s:>8}")
        typer.echo(f"  claims with another outcome: {result['claims_with_another_outcome']}")
        for row in result["examples"]:
            typer.echo(f"    {row['claim_id']}: {row['actual']} -> {row['what_if']}")
