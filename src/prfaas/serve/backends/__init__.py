"""The engines behind an instance shell, one module or package each, behind one interface
(`interface`: `InstanceBackend`, its items, and `build_backend`, which picks one by the
deployment's `backend:`): `torch` (the reference engine on its own thread), `emulated` (a
catalog model's timing and KV bytes, no compute) and `vllm` (a managed `vllm serve` child
with the prfaas connector). Only `torch` loads torch, and only when it is built.
"""
