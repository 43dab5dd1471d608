"""Every reason code the code can write is in schemas/reasons.py and documented in docs/contract.md,
with whether waiting can help."""

from __future__ import annotations

import ast
from pathlib import Path

from schemas.reasons import BY_CODE, REASONS, never_satisfiable_here
from schemas.outcomes import STATUSES

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "docs" / "contract.md"
WRITERS = ["services/allocator/core/*.py", "ledger/*.py", "services/claim/*.py"]
_NAMES = ("code", "rule")


def _str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _codes_in(tree: ast.AST) -> set[str]:
    """Reason codes written literally: Reason("x", ...), code="x" / rule="x" arguments, x passed for
    a parameter named code or rule of a function of the same module, `code = "x"` (also in tuple
    assignments), `rule == "x"`, and `(\"x\", victim)` pairs appended to eviction candidates."""
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    params = {f.name: [a.arg for a in f.args.args] for f in functions}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found |= _call_codes(node, params)
        elif isinstance(node, ast.Assign):
            found |= _assigned_codes(node)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in _NAMES:
            found |= {s for c in node.comparators if (s := _str(c))}
    return {c for c in found if c}


def _call_codes(call: ast.Call, params: dict[str, list[str]]) -> set[str]:
    found = {s for kw in call.keywords if kw.arg in _NAMES and (s := _str(kw.value))}
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if name == "Reason" and call.args and _str(call.args[0]):
        found.add(_str(call.args[0]))
    for i, param in enumerate(params.get(name, [])):
        if param in _NAMES and i < len(call.args) and _str(call.args[i]):
            found.add(_str(call.args[i]))
    if name == "append" and call.args and isinstance(call.args[0], ast.Tuple) and _str(call.args[0].elts[0]):
        found.add(_str(call.args[0].elts[0]))
    return found


def _assigned_codes(assign: ast.Assign) -> set[str]:
    found = set()
    for target in assign.targets:
        pairs = [(target, assign.value)]
        if isinstance(target, ast.Tuple) and isinstance(assign.value, ast.Tuple):
            pairs = list(zip(target.elts, assign.value.elts))
        for t, v in pairs:
            values = [v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]
            found |= {s for x in values if isinstance(t, ast.Name) and t.id in _NAMES and (s := _str(x))}
    return found


def _intake_refusal_codes() -> set[str]:
    """The DomainError codes of ClaimService.prepare become ClaimRejected codes at the intake."""
    tree = ast.parse((REPO / "services/claim/app.py").read_text())
    prepare = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "prepare")
    return {_str(c.args[0]) for c in ast.walk(prepare)
            if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "DomainError" and _str(c.args[0])}


def _end_codes() -> set[str]:
    """ClaimOutcome.code of every final status (services/claim/outcome_view.end_code)."""
    from ledger.state import Claim
    from schemas.types import ClaimSpec
    from services.claim.outcome_view import end_code

    spec = ClaimSpec(claim_id="c", namespace="n")
    ends = [("released", "by holder"), ("released", "unused: no process on its devices"),
            ("evicted", "stale: idle"), ("expired", "lease not renewed"),
            ("lost", "node n-1 lost"), ("lost", "device vanished when the node re-registered")]
    return {end_code(Claim(spec, 1, 0.0, status=s, end_reason=r)) for s, r in ends}


def codes_the_code_writes() -> set[str]:
    from services.allocator.core.rules import NO_NODES, RESERVED, RULES
    from services.claim.outcome_view import _END_CODES

    found = {rule.code for rule in RULES} | {NO_NODES, RESERVED} | set(_END_CODES.values())
    return found | _intake_refusal_codes() | _end_codes() | _literal_codes()


def _literal_codes() -> set[str]:
    found: set[str] = set()
    for pattern in WRITERS:
        for path in REPO.glob(pattern):
            found |= _codes_in(ast.parse(path.read_text()))
    return found


def test_a_placement_rule_is_fleet_bound_exactly_when_waiting_does_not_help():
    from services.allocator.core.rules import RULES, waiting_helps

    for rule in RULES:
        assert (BY_CODE[rule.code].kind == "fleet") == (not rule.waiting_helps), rule.code
    assert all(waiting_helps(r.code) for r in REASONS if r.kind == "wait")


def test_the_scan_finds_codes_of_every_kind():
    found = codes_the_code_writes()
    assert {"no-free-gpu", "quota-exceeded", "quota-single-exceeded", "pool-not-found", "gang-incomplete",
            "invalid", "stale", "priority", "quota-reclaim", "lease-expired", "device-vanished"} <= found


def test_every_code_written_is_in_the_reason_table_and_every_listed_one_is_written():
    found = codes_the_code_writes()
    assert found - set(BY_CODE) == set(), "add them to schemas/reasons.py and docs/contract.md"
    assert set(BY_CODE) - found == set(), "listed but never written"


def test_every_code_in_the_table_is_documented_with_its_kind():
    text = CONTRACT.read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `")}
    missing = [r.code for r in REASONS if r.code not in rows or f"| {r.kind} |" not in rows[r.code]]
    assert missing == []


def test_every_status_is_documented():
    text = CONTRACT.read_text()
    assert [s for s in STATUSES if f"`{s}`" not in text] == []


def test_a_claim_is_never_satisfiable_here_only_when_every_reason_is_about_the_fleet():
    assert never_satisfiable_here(["no-such-gpu", "cuda-incompatible"])
    assert not never_satisfiable_here(["no-such-gpu", "no-free-gpu"])
    assert not never_satisfiable_here([])
