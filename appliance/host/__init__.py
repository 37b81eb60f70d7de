"""This machine: the Docker engine connection, GPUs, cgroups, the page cache, and `doctor`.

Comes after engine because a host's fitness (targets, driver minimum) is judged against the lock.
May import: core, engine.
"""
