"""This machine: the Docker engine connection, the one container lifecycle (`containers`), GPUs
and their memory during a trial, cgroups, filesystems, the page cache, and `doctor`.

Comes after engine because a host's fitness (targets, driver minimum) is judged against the lock.
May import: core, engine.
"""
