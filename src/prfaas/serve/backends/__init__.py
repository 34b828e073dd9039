"""Instance backends that live in modules of their own (docs/architecture.md): `vllm` (a managed
`vllm serve` child with the prfaas connector) and its KV-event bridge."""
