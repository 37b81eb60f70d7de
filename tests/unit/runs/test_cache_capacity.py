"""An explicit `--expert-cache-capacity N` larger than a trial's memory limit leaves room for is
refused before any trial, in one line; `auto`, a capacity that fits and profiles without the
cache pass. The room is worked out here from the planner's byte accounting (another reader of
the same GGUF), not from the module under test."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from appliance.core.errors import ConfigError
from appliance.core.units import parse_size
from appliance.planner.accounting import account_file
from appliance.runs.cache_capacity import check_cache_capacity, explicit_capacity
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import sweep_plan, trial_plan
from appliance.runs.profile import PROFILES_DIR, load_profile
from tests.conftest import run_cli
from tests.models import tiny_model

ENGINE_MIN = "8MiB"


def _profile(tmp_path: Path, capacity: str, memory: str = "96MiB", lookahead: int = 0) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["name"] = "tiny-capacity"
    raw["model"] |= {"file": "tiny.gguf", "bytes": None, "sha256": None, "synth": None}
    raw["limits"] |= {"engine_min_memory": ENGINE_MIN, "memory": memory}
    args = ["--expert-cache", "lru", "--expert-cache-capacity", capacity]
    if lookahead:
        args += ["--expert-lookahead", str(lookahead)]
    raw["variants"][1] |= {"name": "expert-lru", "args": args}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _room(model: Path, memory: str, ahead_experts: int = 0) -> int:
    acc = account_file(model)
    one = max(acc.expert_bytes_by_layer.values())
    fixed = model.stat().st_size - sum(acc.routed_by_layer.values()) + parse_size(ENGINE_MIN)
    return (parse_size(memory) - fixed - ahead_experts * one) // one


def test_capacity_is_read_only_when_it_is_a_number() -> None:
    assert explicit_capacity(["--expert-cache", "lru", "--expert-cache-capacity", "40"]) == 40
    assert explicit_capacity(["--expert-cache-capacity", "auto"]) is None
    assert explicit_capacity(["--expert-cache-capacity"]) is None
    assert explicit_capacity([]) is None


def test_the_largest_capacity_that_fits_passes_and_one_more_is_refused(tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", size="64MiB")
    room = _room(model, "96MiB")
    assert room > 8  # the fixture leaves room for a cache at all
    fits = load_profile(str(_profile(tmp_path, str(room))))
    check_cache_capacity(fits, trial_plan(fits, 1), model, model.stat().st_size)
    over = load_profile(str(_profile(tmp_path, str(room + 1))))
    with pytest.raises(ConfigError, match=r"^variant expert-lru: ") as err:
        check_cache_capacity(over, trial_plan(over, 1), model, model.stat().st_size)
    message = str(err.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"variant expert-lru: --expert-cache-capacity {room + 1} does not fit in 100,663,296 bytes "
        rf"of memory: .* leave room for at most {room}; ask for at most {room}, or auto",
        message,
    )


def test_experts_read_ahead_take_their_room(tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", size="64MiB")
    k = account_file(model).facts.experts_used
    room = _room(model, "96MiB", ahead_experts=2 * k)
    profile = load_profile(str(_profile(tmp_path, str(room + 1), lookahead=2)))
    with pytest.raises(ConfigError, match=rf"at most {room}; ask"):
        check_cache_capacity(profile, trial_plan(profile, 1), model, model.stat().st_size)


def test_each_limit_of_a_sweep_is_checked_and_auto_never_is(tmp_path: Path) -> None:
    model = tiny_model("qwen3moe", size="64MiB")
    room_small = _room(model, "80MiB")
    profile = load_profile(str(_profile(tmp_path, str(room_small + 1))))
    small, large = SweepLimit(parse_size("80MiB"), "80MiB"), SweepLimit(parse_size("160MiB"), "160MiB")
    check_cache_capacity(profile, sweep_plan(profile, [large], 1), model, model.stat().st_size)
    with pytest.raises(ConfigError, match=r"does not fit in 83,886,080 bytes"):
        check_cache_capacity(profile, sweep_plan(profile, [large, small], 1), model, model.stat().st_size)
    automatic = load_profile(str(_profile(tmp_path, "auto", memory="8MiB")))
    check_cache_capacity(automatic, trial_plan(automatic, 1), model, model.stat().st_size)


def test_appliance_run_refuses_it_in_one_line_before_writing_anything(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    model = tiny_model("qwen3moe", size="64MiB")
    (models / "tiny.gguf").symlink_to(model)
    room = _room(model, "96MiB")
    argv = ["run", str(_profile(tmp_path, str(room + 1))), "--models", str(models)]
    argv += ["--out", str(tmp_path / "run"), "--dry-run"]
    refused = run_cli(*argv)
    assert refused.returncode == 2  # a ConfigError: the profile asks for what cannot be
    assert refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(f"error: variant expert-lru: --expert-cache-capacity {room + 1} ")
    assert not (tmp_path / "run").exists()
    planned = run_cli("run", str(_profile(tmp_path, str(room))), *argv[2:], check=True)
    assert f"--expert-cache-capacity {room}" in planned.stdout


def test_with_a_device_only_the_host_s_non_expert_bytes_take_room(tmp_path: Path) -> None:
    """A trial placed with -ngl 5 --n-cpu-moe 2 keeps every layer's dense part and the output
    head on the device: the room is the limit less the host's non-expert bytes (the token
    embeddings, header and padding), so a capacity refused without the device fits with it;
    one past the larger room is refused still."""
    model = tiny_model("qwen3moe", size="64MiB")
    acc = account_file(model)
    one = max(acc.expert_bytes_by_layer.values())
    on_device = sum(
        t.nbytes for t in acc.tensors if t.group not in ("routed_experts", "embeddings")
    )  # every layer's dense part and the output head
    host_fixed = model.stat().st_size - sum(acc.routed_by_layer.values()) - on_device + parse_size(ENGINE_MIN)
    room = (parse_size("96MiB") - host_fixed) // one
    assert room > _room(model, "96MiB")
    profile = load_profile(str(_profile(tmp_path, str(room))))
    placed = [
        dataclasses.replace(t, placement=("-ngl", "5", "--n-cpu-moe", "2")) for t in trial_plan(profile, 1)
    ]
    check_cache_capacity(profile, placed, model, model.stat().st_size)
    with pytest.raises(
        ConfigError,
        match=rf"does not fit in 100,663,296 bytes of memory: .* at most {_room(model, '96MiB')};",
    ):
        check_cache_capacity(profile, trial_plan(profile, 1), model, model.stat().st_size)
    over = load_profile(str(_profile(tmp_path, str(room + 1))))
    placed = [
        dataclasses.replace(t, placement=("-ngl", "5", "--n-cpu-moe", "2")) for t in trial_plan(over, 1)
    ]
    with pytest.raises(ConfigError, match=rf"leave room for at most {room};"):
        check_cache_capacity(over, placed, model, model.stat().st_size)
