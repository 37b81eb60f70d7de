"""A sweep's plan (`appliance.runs.plan`): its trial order and its containers. (Its limits:
test_memory_points.py; the sweep key of profiles: test_profile.py.)"""

import dataclasses
from pathlib import Path

from appliance.host.cgroups import BlockDevice
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import ContainerSettings, LlamaMoeTraceEngine, container_spec, sweep_plan
from appliance.runs.profile import load_profile
from appliance.runs.record import schedule_record


def test_interleaved_sweep_visits_every_limit_and_variant_in_each_repeat() -> None:
    profile = load_profile("tiny-oversub")
    trials = sweep_plan(
        profile, [SweepLimit(100 << 20, "100MiB"), SweepLimit(200 << 20, "200MiB")], repeats=2
    )
    assert [t.name for t in trials] == [
        "001-100MiB-baseline-r1",
        "002-100MiB-demand-mmap-r1",
        "003-100MiB-demand-prefetch-r1",
        "004-200MiB-baseline-r1",
        "005-200MiB-demand-mmap-r1",
        "006-200MiB-demand-prefetch-r1",
        "007-200MiB-baseline-r2",
        "008-200MiB-demand-mmap-r2",
        "009-200MiB-demand-prefetch-r2",
        "010-100MiB-baseline-r2",
        "011-100MiB-demand-mmap-r2",
        "012-100MiB-demand-prefetch-r2",
    ]


def test_each_trial_container_gets_its_own_limit(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=BlockDevice(8, 0, "/dev/sda"), cgroup_version=1, gpu_device_ids=None
    )
    engine = LlamaMoeTraceEngine("img:tag")
    for trial in sweep_plan(
        profile, [SweepLimit(100 << 20, "0.25"), SweepLimit(300 << 20, "300MiB")], repeats=1
    ):
        spec = container_spec(profile, engine, trial, settings, tmp_path, "n", {})
        assert spec["mem_limit"] == spec["memswap_limit"] == trial.memory


def test_belady_takes_the_earlier_demand_mmap_trace_of_its_limit_and_repeat(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub-cache")
    limits = [SweepLimit(100 << 20, "0.25"), SweepLimit(200 << 20, "0.5")]
    for order in ("interleaved", "blocked"):
        shaped = dataclasses.replace(profile, schedule=dataclasses.replace(profile.schedule, order=order))
        trials = sweep_plan(shaped, limits, repeats=2)
        by_name = {t.name: t for t in trials}
        belady = [t for t in trials if t.variant.name == "expert-belady"]
        assert len(belady) == 4
        for t in belady:
            source = by_name[str(t.future)]
            assert (source.variant.name, source.memory, source.repeat) == ("demand-mmap", t.memory, t.repeat)
            assert source.index < t.index
        assert all(t.future is None for t in trials if t.variant.name != "expert-belady")
    trials = sweep_plan(profile, limits, repeats=1)
    assert [(t.name, t.future) for t in trials if t.future] == [
        ("006-100MiB-expert-belady-r1", "002-100MiB-demand-mmap-r1"),
        ("012-200MiB-expert-belady-r1", "008-200MiB-demand-mmap-r1"),
    ]
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=None, cgroup_version=2, gpu_device_ids=None
    )
    engine = LlamaMoeTraceEngine("img:tag")
    future = tmp_path / "trials" / "002-100MiB-demand-mmap-r1" / "trace.moetrace"
    spec = container_spec(profile, engine, trials[5], settings, tmp_path / "s", "n", {}, future)
    assert spec["volumes"][str(future)] == {"bind": "/future/trace.moetrace", "mode": "ro"}
    command = spec["command"]
    assert command[command.index("--future") + 1] == "/future/trace.moetrace"
    assert command[-5:] == ["--no-repack", "--expert-cache", "belady", "--expert-cache-capacity", "auto"]
    lru = container_spec(profile, engine, trials[3], settings, tmp_path / "s", "n", {})
    assert "--future" not in lru["command"] and len(lru["volumes"]) == 2


def test_the_schedule_records_a_variants_future_only_where_it_has_one() -> None:
    profile = load_profile("tiny-oversub-cache")
    record = schedule_record(profile, sweep_plan(profile, [SweepLimit(100 << 20, "0.25")], repeats=1))
    futures = {v["name"]: v.get("future") for v in record["variants"]}
    assert futures["expert-belady"] == "demand-mmap"
    assert [v for v in record["variants"] if "future" in v] == [record["variants"][-1]]
