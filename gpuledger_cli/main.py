"""`gpuledger`: the one command for running, using and operating gpuledger."""

from __future__ import annotations

import math

import click
import typer

from gpuledger_cli import commands_registry


def _finite(self, value, param, ctx):
    """click's FLOAT takes what Python's float() does, `nan` and `inf` too, and a range's bounds
    let NaN through (every comparison with it is false): `claim submit --wait nan` sent a request
    it gave up on at once ("no answer ... within nans"), `--lease nan` reached the service as
    null. Every float option of the CLI is a finite number; the usage error names the option."""
    number = click.types._NumberParamTypeBase.convert(self, value, param, ctx)
    if not math.isfinite(number):
        self.fail(f"{value!r} is not a finite number.", param, ctx)
    return number


click.types.FloatParamType.convert = _finite  # FloatRange checks its bounds on what this returns

# rich_markup_mode=None: typer's rich help formatter costs about 0.4 s of CPU to import, more than
# everything else `gpuledger --help` does; each area's own help (`gpuledger claim --help`) keeps it.
app = typer.Typer(help="gpuledger: an event-sourced GPU allocation control plane on NATS JetStream.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=commands_registry.LazyGroup,
                  rich_markup_mode=None)
commands_registry.register(app)


@app.callback()
def _root() -> None:
    # A group needs a callback to exist before any area is loaded (they load lazily). Every
    # command's stdout shows other people's control characters as text (gpuledger_cli/safe_output.py).
    from gpuledger_cli.safe_output import install

    install()

if __name__ == "__main__":
    app()
