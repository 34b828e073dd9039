"""The `vllm` backend (docs/vllm.md): `backend` (the `InstanceBackend` over a managed `vllm
serve` child), `child` (its interpreter, environment and connector settings), `child_log`
(where its output goes), `api` (its OpenAI API as prfaas speaks it), `events` (its KV cache
events as prfaas's), `text` (the output text made as vLLM makes it) and `arch` (architectures
only vLLM knows). The core venv never imports vLLM: the child runs in `.venv-vllm`.
"""
