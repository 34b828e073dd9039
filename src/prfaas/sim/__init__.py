"""The discrete-event simulator (pure logic: docs/architecture.md, Packages): the event core,
modelled instances and links, and the scenario runner, driving the live system's scheduler and
cache."""
