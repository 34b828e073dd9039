"""Instance backends that live in modules of their own (DESIGN.md): `vllm` (a managed
`vllm serve` child with the prfaas connector) and its KV-event bridge."""
