"""`gpuledger up` keeps what it started running: a nats-server or a service that dies is said so in
one line on stderr and started again after a pause that grows with each death; one that keeps
dying (more than MAX_RESTARTS deaths, none of its runs lasting STABLE_S) stops the stack, saying
where its log is."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_RESTARTS = 5
STABLE_S = 60.0  # a run this long forgives the earlier deaths
DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class Unit:
    """Something `up` started: how to see that it ended, and how to start it again."""

    name: str
    exit_code: Callable[[], int | None]  # None while it runs
    start: Callable[[], None]
    log_path: Path
    deaths: int = 0
    started_at: float = 0.0
    restart_at: float | None = None


def describe(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


_RESTART = re.compile(r"gpuledger: (.+?) (?:was killed by signal -?\d+|exited with code -?\d+); restarting")


def restarted(line: str) -> str | None:
    """The unit a line of `up`'s stderr says is being restarted, else None (for readers of the
    log, e.g. bench chaos: the wording lives here only)."""
    match = _RESTART.search(line)
    return match.group(1) if match else None


class Supervisor:
    def __init__(self, units: list[Unit], say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.units, self.say, self.clock = units, say, clock
        now = clock()
        for unit in units:
            unit.started_at = now

    def step(self) -> bool:
        """Look at every unit once; False when one keeps dying and the stack should stop."""
        for unit in self.units:
            if not self._tend(unit):
                return False
        return True

    def _tend(self, unit: Unit) -> bool:
        now = self.clock()
        if unit.restart_at is not None:
            if now >= unit.restart_at:
                self._restart(unit, now)
            return True
        code = unit.exit_code()
        if code is None:
            if unit.deaths and now - unit.started_at >= STABLE_S:
                unit.deaths = 0
            return True
        unit.deaths += 1
        if unit.deaths > MAX_RESTARTS:
            self.say(f"{unit.name} {describe(code)} again ({unit.deaths} times in a row); giving up "
                     f"and stopping, see {unit.log_path}")
            return False
        delay = DELAYS_S[min(unit.deaths - 1, len(DELAYS_S) - 1)]
        self.say(f"{unit.name} {describe(code)}; restarting it in {delay:g} s "
                 f"(restart {unit.deaths} of {MAX_RESTARTS}; log {unit.log_path})")
        unit.restart_at = now + delay
        return True

    def _restart(self, unit: Unit, now: float) -> None:
        unit.restart_at = None
        try:
            unit.start()
        except Exception as err:  # counted as one more death on the next look
            self.say(f"{unit.name} did not start again: {err}")
        unit.started_at = now

    def run(self, stop: dict, interval_s: float = 0.3) -> bool:
        """Until `stop["now"]`; False when it gave up on a unit."""
        while not stop["now"]:
            time.sleep(interval_s)
            if not stop["now"] and not self.step():
                return False
        return True
