"""Engines other than ours behind prfaas's router, scheduler and transfer layer.

Each integration runs inside its engine's own virtual environment and is never imported by
the core packages (docs/architecture.md walls): `vllm` (connector, serve wrapper, tiny checkpoints).
"""
