"""The only modules that chain stages: `run` (a profile to a sealed, verified bundle and its
evidence comparison), `sweep` (one profile over memory limits), `demo` (the miniature sweep),
`scale` (the experiment at its own scale on the cpu image), `repro` (a target's reproduction
profiles, after its preflight), `report_page` (`appliance report`: verify a bundle again and
write its HTML page) and `resume_check` (the seal check before a run is resumed).

May import: every stage except cluster and cli.
"""
