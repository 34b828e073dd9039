"""The vLLM integration, run inside vLLM's own venv: the prfaas KV connector, its transfer
side, the settings the instance shell hands it, and the `vllm serve` entry point."""
