"""Sweep limits, the sweep key of profiles, the sweep's trial order and its containers."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from appliance.core.errors import ConfigError
from appliance.host.cgroups import BlockDevice
from appliance.runs.memory_points import (
    SweepLimit,
    limit_label,
    parse_memory_list,
    parse_memory_point,
    resolve_limits,
)
from appliance.runs.plan import ContainerSettings, LlamaMoeTraceEngine, container_spec, sweep_plan
from appliance.runs.profile import PROFILES_DIR, load_profile
from appliance.runs.record import schedule_record

MODEL = 417_356_704


def test_fractions_become_whole_pages_of_the_model_file() -> None:
    points = parse_memory_list("0.25, 0.5,1.2")
    resolved = resolve_limits(points, MODEL, 64 << 20, "tiny")
    assert [limit.point for limit in resolved] == ["0.25", "0.5", "1.2"]
    limits = [limit.bytes for limit in resolved]
    assert limits == [104_337_408, 208_674_816, 500_826_112]
    assert all(limit % 4096 == 0 for limit in limits)
    assert limits[0] <= 0.25 * MODEL < limits[0] + 4096


def test_sizes_keep_their_bytes_and_come_back_ascending() -> None:
    resolved = resolve_limits(parse_memory_list("600MiB,150MiB,0.5"), MODEL, 64 << 20, "tiny")
    assert resolved == [
        SweepLimit(150 << 20, "150MiB"),
        SweepLimit(208_674_816, "0.5"),
        SweepLimit(600 << 20, "600MiB"),
    ]
    limits = [limit.bytes for limit in resolved]
    assert [limit_label(m) for m in limits] == ["150MiB", "199MiB", "600MiB"]
    assert limit_label(6 << 30) == "6GiB"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.000000001", "rounds to zero bytes"),
        ("32MiB", "below profile tiny's engine minimum of 67108864 bytes"),
        ("0.5,0.5", "are the same limit"),
        ("200MiB,209715200B", "are the same limit"),
    ],
)
def test_bad_limits_are_refused_before_anything_starts(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        resolve_limits(parse_memory_list(text), MODEL, 64 << 20, "tiny")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "must be above 0"),
        ("-0.5", "must be above 0"),
        ("8589934592", "write sizes with a unit"),
        ("lots", "expected a fraction of the model"),
        ("0.3,,0.5", "comma-separated list"),
        ("", "comma-separated list"),
    ],
)
def test_unreadable_points_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_memory_list(text)
    assert message in str(info.value)


def test_a_point_is_a_fraction_or_a_size() -> None:
    assert parse_memory_point(0.3).fraction == 0.3
    assert parse_memory_point("6GiB").size == 6 << 30
    with pytest.raises(ConfigError, match=r"^memory True: expected a fraction of the model \(0.5\)"):
        parse_memory_point(True)


def _profile_with(tmp_path: Path, sweep: object) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["sweep"] = sweep
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_builtin_profiles_declare_their_sweeps() -> None:
    tiny = load_profile("tiny-oversub").sweep
    assert tiny is not None and [p.text for p in tiny.memory] == ["0.25", "0.5", "1.2"]
    assert tiny.n_predict == 64
    qwen = load_profile("qwen35-8g").sweep
    assert qwen is not None and [p.size for p in qwen.memory] == [6 << 30, 8 << 30, 12 << 30, 16 << 30]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({"memory": []}, "/sweep/memory: needs at least 1 items"),
        ({"memory": ["lots"]}, "/sweep/memory/0: memory 'lots'"),
        ({"memory": [0.5], "limits": 1}, "/sweep/limits: unknown field"),
        ({"memory": [0.5], "n_predict": 0}, "/sweep/n_predict: must be at least 1"),
        ({"memory": "0.5"}, "/sweep/memory: expected array"),
    ],
)
def test_bad_sweep_keys_are_refused_naming_the_field(tmp_path: Path, sweep: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_profile(str(_profile_with(tmp_path, sweep)))
    assert message in str(info.value)


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
