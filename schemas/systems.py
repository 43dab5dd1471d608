"""Publishing systems: other systems that submit claims, each with a NATS user of its own and the
namespaces it may claim in (docs/contract.md "One user per system").

A system publishes on subjects that carry its name (`gpu.intake.claim.<system>`,
`gpu.cmd.claim.release.<system>`, ...), and its user may publish on those only, so nats-server
itself keeps one system off another's subjects; the claim service reads the system from the
subject a message arrived on (never from the payload), records it on the claim and refuses a
release or renewal of another system's claim and a claim outside the system's namespaces.

Declared as `NAME:NAMESPACE[,NAMESPACE...]`, several separated by `;` or blanks
(GPULEDGER_SYSTEMS, `gpuledger up --system`); the namespace `*` allows every namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas import subjects

ANY_NAMESPACE = "*"
# a DNS label: a NATS subject token as it is, and a user name `system-<name>` nobody else has
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")
_NAMESPACE = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")  # schemas.types.Name
USER_PREFIX = "system-"
# the commands a system may send about its own claims, each on `gpu.cmd.claim.<verb>.<system>`
VERBS = ("submit", "release", "renew", "activity")


class SystemsError(ValueError):
    """A declaration of systems that cannot be used; the message says which part and why."""


@dataclass(frozen=True)
class System:
    name: str
    namespaces: tuple[str, ...]

    @property
    def user(self) -> str:
        """Its NATS user."""
        return USER_PREFIX + self.name

    def allows(self, namespace: str) -> bool:
        return ANY_NAMESPACE in self.namespaces or namespace in self.namespaces

    def spec(self) -> str:
        return f"{self.name}:{','.join(self.namespaces)}"


def parse_system(text: str) -> System:
    """One `NAME:NS[,NS...]`."""
    name, colon, rest = text.strip().partition(":")
    if not colon:
        raise SystemsError(f"system {text.strip()!r}: write NAME:NAMESPACE[,NAMESPACE...] "
                           "(e.g. billing:team-a,team-b; `*` for every namespace)")
    if not _NAME.fullmatch(name):
        raise SystemsError(f"system name {name!r}: lower-case letters, digits and '-', 1-40 "
                           "characters, starting and ending with a letter or digit")
    namespaces = tuple(dict.fromkeys(n.strip() for n in rest.split(",") if n.strip()))
    if not namespaces:
        raise SystemsError(f"system {name!r} names no namespace: give at least one (`*` for every namespace)")
    for namespace in namespaces:
        if namespace != ANY_NAMESPACE and not _NAMESPACE.fullmatch(namespace):
            raise SystemsError(f"system {name!r}: namespace {namespace!r} is not a namespace name "
                               "(lower-case letters, digits, '.', '_', '-'; or `*`)")
    return System(name, namespaces)


def parse_systems(text: str | list[str] | tuple[str, ...]) -> tuple[System, ...]:
    """Every system of a declaration (a string of `;`- or blank-separated entries, or a list of
    them); a name declared twice is refused."""
    parts = [text] if isinstance(text, str) else list(text)
    entries = [e for part in parts for e in re.split(r"[;\s]+", part) if e]
    systems = tuple(parse_system(e) for e in entries)
    seen: set[str] = set()
    for system in systems:
        if system.name in seen:
            raise SystemsError(f"system {system.name!r} is declared twice: one entry per system")
        seen.add(system.name)
    return systems


def spec_of(systems: tuple[System, ...] | list[System]) -> str:
    """The declaration that parses back to `systems` (how `gpuledger up` hands them on)."""
    return ";".join(s.spec() for s in systems)


# --- subjects -----------------------------------------------------------------------------------


def intake(system: str) -> str:
    """A system's durable intake subject (stream GPULEDGER_INTAKE)."""
    return f"{subjects.INTAKE_CLAIMS}.{system}"


def command(verb: str, system: str) -> str:
    """A system's request subject for `verb` (submit, release, renew, activity)."""
    return subjects.command(f"claim.{verb}.{system}")


def outcomes(system: str) -> str:
    """Every outcome subject of a system's claims (`schemas.subjects.outcome(id, system)`): what
    its user may subscribe to and direct-get, and nothing else of the outcomes."""
    return f"{subjects.SYSTEM_OUTCOMES}.{system}.>"


def of_subject(subject: str, base: str) -> str:
    """The system a message on `subject` came from, for a subject under `base` (its last token);
    "" for `base` itself (the shared `publisher` user and ops)."""
    if subject == base or not subject.startswith(base + "."):
        return ""
    return subject[len(base) + 1:]
