"""CPU time of CLI commands: `python -m bench.cli_cpu [--runs N] -- CMD ...` (default: `--help`,
`claim get` of a claim that does not exist and `--version`-like no-ops against the running stack).

Prints user+system CPU seconds per run (minimum and median over the runs) from the children's
rusage, which counts only the command's own process, whatever else loads the machine. The figure
the issue asks for: `gpuledger --help` and `gpuledger claim get` under 0.3 s of CPU.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

GPULEDGER = str(Path(sys.executable).parent / "gpuledger")
DEFAULTS = (f"{GPULEDGER} --help", f"{GPULEDGER} claim --help", f"{GPULEDGER} claim get bench-cpu-none")


def cpu_of(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (min and median reported)")
    parser.add_argument("commands", nargs="*", help="commands to time, each one quoted string")
    args = parser.parse_args(argv)
    for command in args.commands or DEFAULTS:
        times = sorted(cpu_of(shlex.split(command)) for _ in range(args.runs))
        print(f"{min(times):6.3f} s min  {statistics.median(times):6.3f} s median  CPU  {command}")


if __name__ == "__main__":
    main()
