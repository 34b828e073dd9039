"""The import contracts of serve's rooms (pyproject's `[tool.importlinter]`, docs/architecture.md)
name modules and packages (import-linter forbids modules, it cannot allow only a few), so a
module added outside them would slip past: every serve module is in a room or is one of the
shared modules, and every one is forbidden to `serve.config` (itself or a package above it)
unless config may import it (its own package's modules, the exception tree)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "src" / "prfaas" / "serve"
CONFIG = "prfaas.serve.config"
CONFIG_MAY_IMPORT = {"prfaas.serve", "prfaas.serve.errors"}


def _serve_modules() -> set[str]:
    modules = set()
    for path in SERVE.rglob("*.py"):
        parts = path.relative_to(SERVE.parent.parent).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _contract(contract_id: str) -> dict[str, list[str]]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in contracts["contracts"] if c["id"] == contract_id]
    return contract


def _covered(module: str, forbidden: set[str]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


def test_every_serve_behaviour_module_is_forbidden_to_config() -> None:
    contract = _contract("config-no-behaviour")
    assert contract["source_modules"] == [CONFIG]
    forbidden = set(contract["forbidden_modules"])
    unlisted = {
        m
        for m in _serve_modules() - CONFIG_MAY_IMPORT
        if not _covered(m, forbidden) and not _covered(m, {CONFIG})
    }
    assert not unlisted, f"add to the contract's forbidden_modules: {sorted(unlisted)}"


def test_every_serve_module_is_in_a_room_or_shared() -> None:
    """A module at serve's top level is a shared one (`serve-shared`'s sources, which import
    no room) or a room (a package the contracts forbid to it, or config)."""
    shared = _contract("serve-shared")
    rooms = {*shared["forbidden_modules"], CONFIG}
    top = {m for m in _serve_modules() if m.count(".") == 2}
    assert top - set(shared["source_modules"]) - rooms == set()
    assert all((SERVE / room.rsplit(".", 1)[1] / "__init__.py").is_file() for room in rooms)
