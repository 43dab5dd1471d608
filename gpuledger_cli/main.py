"""`gpuledger`: the one command for running, using and operating gpuledger."""

from __future__ import annotations

import typer

app = typer.Typer(help="gpuledger: an event-sourced GPU allocation control plane on NATS JetStream.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


def _register() -> None:
    # Each area adds its commands here; one import per module keeps this file a table of contents.
    from gpuledger_cli import commands_registry

    commands_registry.register(app)


_register()

if __name__ == "__main__":
    app()
