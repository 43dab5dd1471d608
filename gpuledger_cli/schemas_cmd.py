"""`gpuledger schemas export|check`: JSON Schema for every event and command, from the Structs."""

from __future__ import annotations

from pathlib import Path

import typer

from schemas.export import check_schemas, write_schemas

schemas_app = typer.Typer(help="The event and command contract as JSON Schema.", no_args_is_help=True)


@schemas_app.command("export")
def export(out: Path = typer.Option(None, "--out", help="folder (default: schemas/json in the source)")) -> None:
    """Write schemas/json/*.json from the msgspec types."""
    for path in write_schemas(out):
        typer.echo(str(path))


@schemas_app.command("check")
def check() -> None:
    """Exit 1 if the checked-in JSON Schema files differ from the types."""
    stale = check_schemas()
    if stale:
        typer.secho("stale: " + ", ".join(stale) + " (run `make schemas`)", err=True, fg="red")
        raise typer.Exit(1)
    typer.echo("schemas are current")


def register(app: typer.Typer) -> None:
    app.add_typer(schemas_app, name="schemas")
