"""A cluster cannot run a variant whose --future is an earlier trial's trace: refused in one line
before it connects (its nodes run trials at once and keep their outputs until each ends)."""

from pathlib import Path

import pytest
from rich.console import Console

from appliance.cluster.run import cluster_executor
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import ContainerSettings, sweep_plan
from appliance.runs.prepare import PreparedRun, TargetChoice
from appliance.runs.profile import load_profile


def test_a_sweep_with_a_future_variant_is_refused_before_connecting(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub-cache")
    trials = sweep_plan(profile, [SweepLimit(100 << 20, "0.25")], repeats=1)
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=None, cgroup_version=2, gpu_device_ids=None
    )
    prepared = PreparedRun(
        profile,
        None,
        TargetChoice("cpu", None, None),
        "img:tag",
        True,
        settings,
        trials,
        tmp_path,  # type: ignore[arg-type]
    )
    make = cluster_executor("127.0.0.1:1")  # nothing listens there: connecting would fail otherwise
    with pytest.raises(
        ApplianceError,
        match=r"^variant expert-belady takes its --future from trial 002-100MiB-demand-mmap-r1's trace, "
        r"which a cluster's nodes cannot order or share: run it without --cluster$",
    ):
        make(prepared, load_lock(), Console(quiet=True))
