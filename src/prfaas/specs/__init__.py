"""Model, chip and performance specifications (pure data: docs/architecture.md, Packages):
`ModelSpec` and its layer groups, the chip catalog, `PerfProfile`, and the readers of Hugging
Face configs."""
