"""Model, chip and performance specifications (pure data: DESIGN.md, Rooms): `ModelSpec` and
its layer groups, the chip catalog, `PerfProfile`, and the readers of Hugging Face configs."""
