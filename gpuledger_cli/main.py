"""`gpuledger`: the one command for running, using and operating gpuledger."""

from __future__ import annotations

import typer

from gpuledger_cli import commands_registry

# rich_markup_mode=None: typer's rich help formatter costs about 0.4 s of CPU to import, more than
# everything else `gpuledger --help` does; each area's own help (`gpuledger claim --help`) keeps it.
app = typer.Typer(help="gpuledger: an event-sourced GPU allocation control plane on NATS JetStream.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=commands_registry.LazyGroup,
                  rich_markup_mode=None)
commands_registry.register(app)


@app.callback()
def _root() -> None:
    # A group needs a callback to exist before any area is loaded (they load lazily).
    pass

if __name__ == "__main__":
    app()
