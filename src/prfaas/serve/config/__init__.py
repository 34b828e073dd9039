"""Configuration of `serve`: the deployment file's models, resolved once at the edge into
frozen values, and nothing that behaves (an import-linter contract, `config-no-behaviour`).

`deployment` (the file, every knob, the one module that reads the environment),
`admission_spec` (its `router.admission` block) and `vllm_spec` (its `vllm:` block).
"""
