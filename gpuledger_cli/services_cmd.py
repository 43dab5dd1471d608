"""`gpuledger service NAME`: run one service process (what `gpuledger up` starts)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os

import typer

from gpuledger_cli.client import die
from shared.natscluster import INBOX_PREFIX_ENV, checked_inbox_prefix
from shared.service import leaving_nothing_behind, serve
from shared.settings import Settings
from shared.telemetry import setup_tracing

SERVICES = {
    "claim": "services.claim.app",
    "allocator": "services.allocator.app",
    "quota": "services.quota.app",
    "pool-controller": "services.pool_controller.app",
    "projector": "services.projector.app",
}


def builder_for(name: str):
    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    return importlib.import_module(SERVICES[name]).build


def run_service(name: str, build) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    logging.getLogger("faststream").setLevel(logging.WARNING)
    setup_tracing(name)
    try:
        from uvloop import run as run_loop  # faster request/reply latency (DESIGN.md)
    except ImportError:
        run_loop = asyncio.run
    run_loop(leaving_nothing_behind(serve(name, Settings(), build)))


def register(app: typer.Typer) -> None:
    @app.command("service")
    def service(name: str = typer.Argument(..., help=f"one of: {', '.join(SERVICES)}")) -> None:
        """Run one service in the foreground (reads GPULEDGER_* settings from the environment)."""
        build = builder_for(name)
        prefix = os.environ.get(INBOX_PREFIX_ENV)
        if prefix:  # refused before anything starts: one line, not a traceback from the connect
            try:
                checked_inbox_prefix(prefix)
            except ValueError as err:
                die(str(err), code=2)
        run_service(name, build)
