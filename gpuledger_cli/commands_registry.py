"""The table of CLI areas: each module exposes `register(app)`; missing ones are skipped."""

from __future__ import annotations

import importlib

import typer

AREAS = (
    "gpuledger_cli.up",
    "gpuledger_cli.claims",
    "gpuledger_cli.events",
    "gpuledger_cli.schemas_cmd",
    "gpuledger_cli.services_cmd",
    "gpuledger_cli.quota",
    "gpuledger_cli.pools",
    "gpuledger_cli.webhook",
    "gpuledger_cli.endpoints",
    "gpuledger_cli.nodes",
    "gpuledger_cli.projection",
    "gpuledger_cli.bench",
    "gpuledger_cli.simulate",
    "gpuledger_cli.whatif",
)


def register(app: typer.Typer) -> None:
    for name in AREAS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # the area is not built yet; anything else is a real error
                continue
            raise
        module.register(app)
