"""Runs across a lab's machines on Ray (the optional `cluster` extra): connecting (`connect`),
the Ray trial executor (`executor`, `node`: what runs on a node), which nodes may run a run's
trials (`preflight`, `resources`), `--cluster` for a run (`run`), `appliance cluster join` and
`status`. Nothing outside this package and the CLI imports ray.

May import: core .. workflows.
"""
