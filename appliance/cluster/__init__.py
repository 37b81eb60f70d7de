"""Runs across a lab's machines on Ray (the optional `cluster` extra): the Ray trial executor,
node checks, `appliance cluster join` and `status`. Nothing outside this package and the CLI
imports ray."""
