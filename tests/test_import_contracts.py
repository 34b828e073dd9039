"""The import contract that keeps `serve.config` free of behaviour lists serve's behaviour
modules by name (import-linter forbids modules, it cannot allow only a few): a serve module
added without being listed would slip past it. Every serve module is either listed there or
one of the configuration modules config may import."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "src" / "prfaas" / "serve"
CONFIG_MAY_IMPORT = {
    "prfaas.serve",
    "prfaas.serve.config",
    "prfaas.serve.admission_spec",
    "prfaas.serve.errors",
    "prfaas.serve.backends",
    "prfaas.serve.backends.vllm_spec",
}


def _serve_modules() -> set[str]:
    modules = set()
    for path in SERVE.rglob("*.py"):
        parts = path.relative_to(SERVE.parent.parent).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def test_every_serve_behaviour_module_is_forbidden_to_config() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [
        c for c in contracts["contracts"] if c["name"] == "serve.config imports no behaviour"
    ]
    unlisted = _serve_modules() - CONFIG_MAY_IMPORT - set(contract["forbidden_modules"])
    assert not unlisted, f"add to the contract's forbidden_modules: {sorted(unlisted)}"
