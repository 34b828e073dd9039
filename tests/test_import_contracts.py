"""The import contract that keeps `serve.config` free of behaviour names what config may not
import (import-linter forbids modules, it cannot allow only a few): a serve module added
outside the forbidden rooms and modules would slip past it. Every serve module is either
forbidden there (itself or a package above it) or one config may import: its own package's,
and the exception tree."""

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


def _covered(module: str, forbidden: set[str]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


def test_every_serve_behaviour_module_is_forbidden_to_config() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in contracts["contracts"] if c["id"] == "config-no-behaviour"]
    assert contract["source_modules"] == [CONFIG]
    forbidden = set(contract["forbidden_modules"])
    unlisted = {
        m
        for m in _serve_modules() - CONFIG_MAY_IMPORT
        if not _covered(m, forbidden) and not _covered(m, {CONFIG})
    }
    assert not unlisted, f"add to the contract's forbidden_modules: {sorted(unlisted)}"
