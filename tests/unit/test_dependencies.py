"""The layering rules, checked on the source: a service never reaches into another service's
folder (they share the contract in `schemas`, the fold in `ledger` and I/O helpers in `shared`),
and the lower layers never import the upper ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# package -> the top-level packages of this project it may import (besides itself)
ALLOWED = {
    "schemas": set(),
    "ledger": {"schemas"},
    "shared": {"schemas"},
}
PROJECT = {"schemas", "ledger", "shared", "services", "gpuledger_cli", "simulator", "bench"}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module name a file imports, with its line (imports inside functions too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def cross_service_imports(path: Path, root: Path = ROOT) -> list[str]:
    own = path.relative_to(root / "services").parts[0]
    where = path.relative_to(root)
    bad = []
    for line, module in imported_modules(path):
        parts = module.split(".")
        if parts[0] == "services" and len(parts) > 1 and parts[1] != own:
            bad.append(f"{where}:{line} imports {module}")
        if parts[0] in {"gpuledger_cli", "simulator", "bench"}:
            bad.append(f"{where}:{line} imports {module}")
    return bad


def layer_violations(package: str) -> list[str]:
    allowed = ALLOWED[package] | {package}
    bad = []
    for path in sources(package):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top in PROJECT and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_no_service_imports_another_services_folder():
    bad = [line for path in sources("services") for line in cross_service_imports(path)]
    assert bad == [], "services share schemas/, ledger/ and shared/, never each other's folders:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_lower_layers_do_not_import_upper_ones(package):
    bad = layer_violations(package)
    assert bad == [], f"{package}/ may import only {sorted(ALLOWED[package]) or 'nothing else'}:\n" + "\n".join(bad)


def test_the_checker_sees_a_cross_service_import(tmp_path):
    """The rule can fail: a file of the claim service importing the allocator is caught."""
    bad_file = tmp_path / "services" / "claim" / "bad.py"
    bad_file.parent.mkdir(parents=True)
    bad_file.write_text("def f():\n    from services.allocator.loop import Allocator\n")
    assert cross_service_imports(bad_file, tmp_path) == [
        "services/claim/bad.py:2 imports services.allocator.loop"]
