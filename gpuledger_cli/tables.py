"""Where the CLI's tables are printed. rich draws at the terminal's width; piped into a file, `less`
or another program it assumes 80 columns and squeezes every cell to a few letters ("te…"), which is
exactly when people read the output most carefully. Off a terminal, tables get room to be whole."""
from __future__ import annotations

import os
import sys

# wide enough for a claim id, a node name and a full reason on one line
PIPED_WIDTH = 240


def table_console(stderr: bool = False):
    from rich.console import Console  # only the commands that draw tables pay for rich

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)  # the terminal's own width (or COLUMNS)
    # a shell's COLUMNS describes the terminal, not the file or program reading the pipe: it may
    # widen the table, never squeeze it
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=max(PIPED_WIDTH, int(columns) if columns.isdigit() else 0))
