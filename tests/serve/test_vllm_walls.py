"""The vLLM integration's walls: the core venv has no vLLM, and nothing outside
`prfaas.integrations` (and the vllm backend's own modules, which only start a child) loads it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

MODULES = [
    "prfaas.scheduler",
    "prfaas.sim",
    "prfaas.kvcache",
    "prfaas.serve.router.app",
    "prfaas.serve.instance.runtime",
    "prfaas.serve.backends.vllm.backend",
    "prfaas.serve.backends.vllm.events",
    "prfaas.serve.backends.vllm.arch",
    "prfaas.serve.backends.vllm.api",
    "prfaas.serve.backends.vllm.child",
]


def test_the_core_venv_does_not_have_vllm() -> None:
    assert importlib.util.find_spec("vllm") is None


def test_core_modules_and_the_vllm_backend_never_import_vllm_or_torch() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
