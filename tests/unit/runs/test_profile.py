import dataclasses
import re
import struct
from pathlib import Path

import pytest
import yaml

from appliance.core.digests import sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.units import format_size, parse_size
from appliance.runs.model_files import check_routes, make_routes
from appliance.runs.plan import trial_plan
from appliance.runs.profile import PROFILES_DIR, builtin_profiles, load_profile, select_variants
from tests.conftest import run_cli

GIB = 1 << 30


def test_builtins_are_the_three_profiles_of_the_issue() -> None:
    assert builtin_profiles() == [
        "qwen3-30b-16",
        "qwen3-30b-shape",
        "qwen3-30b-shape-prefill",
        "qwen3-30b-shape-slice",
        "qwen35-8g",
        "qwen35-shape-8g",
        "qwen35-shape-8g-prefill",
        "qwen35-shape-8g-verdict",
        "qwen35-shape-slice",
        "qwen35-shape-slice-stand-in",
        "tiny-oversub",
        "tiny-oversub-cache",
        "tiny-oversub-prefill",
        "tiny-stand-in",
    ]


def test_the_slice_on_the_stand_in_is_qwen35_shape_slice_with_a_device() -> None:
    """The same model, routes, prompt and engine options as the CPU-only slice, so its traces
    are that run's routes; placed by the planner on a device budget."""
    stand_in, cpu = load_profile("qwen35-shape-slice-stand-in"), load_profile("qwen35-shape-slice")
    assert (stand_in.target, stand_in.gpu, stand_in.placement.mode) == ("cpu", "stand-in", "plan")
    assert (stand_in.model, stand_in.routes) == (cpu.model, cpu.routes)
    assert stand_in.schedule == cpu.schedule and stand_in.engine_args == cpu.engine_args
    assert stand_in.experimental == cpu.experimental
    assert {v.routes for v in stand_in.variants} == {cpu.routes.file if cpu.routes else None}
    assert stand_in.limits.memory < cpu.limits.memory


def test_tiny_stand_in_is_tiny_oversub_on_the_stand_in_gpu() -> None:
    stand_in, tiny = load_profile("tiny-stand-in"), load_profile("tiny-oversub")
    assert (stand_in.target, stand_in.gpu, stand_in.limits.vram) == ("cpu", "stand-in", 256 << 20)
    assert stand_in.placement.mode == "plan"
    assert stand_in.model == tiny.model and stand_in.variants == tiny.variants
    assert stand_in.limits.memory == tiny.limits.memory and stand_in.engine_args == tiny.engine_args


@pytest.mark.parametrize(
    ("name", "like", "size", "layers"),
    [
        ("qwen35-shape-8g", "qwen35-35b-a3b-ud-iq4_nl", 17_940_038_176, None),
        ("qwen3-30b-shape", "qwen3-30b-a3b-q4_k_m", 18_554_438_496, None),
        ("qwen35-shape-slice", "qwen35-35b-a3b-ud-iq4_nl", 2_772_117_216, 4),
        ("qwen3-30b-shape-slice", "qwen3-30b-a3b-q4_k_m", 1_241_170_880, 2),
    ],
)
def test_the_shape_profiles_pin_their_synthetic_files(
    name: str, like: str, size: int, layers: int | None
) -> None:
    p = load_profile(name)
    assert (p.target, p.gpu, p.limits.swap) == ("cpu", "none", 0)
    assert p.model.like == like and p.model.bytes == size and p.model.pinned
    assert p.model.synth is not None and p.model.synth.get("layers") == layers
    assert [v.name for v in p.variants][:2] == ["baseline", "demand-mmap"]
    if layers is None:  # the full shapes: exactly 8 GiB, 64 decode tokens, 3 interleaved repeats
        assert p.limits.memory == 8 * GIB and p.schedule.n_predict >= 64
        assert (p.schedule.repeats, p.schedule.order) == (3, "interleaved")
    else:  # the slices page: their limit is below the file
        assert p.limits.memory < size


def test_qwen35_shape_8g_sweeps_exactly_8_gib_forced_from_calibrated_routes(tmp_path: Path) -> None:
    """Every variant forced from the calibrated synthetic routes (made the same every time, the
    pinned sha256), the prompt's 45 bytes its 45 prompt tokens, decode all 64 of its steps; the
    expert-cache variants with 0004, belady's future the demand-mmap trial's trace."""
    p = load_profile("qwen35-shape-8g")
    assert [v.name for v in p.variants] == [
        "baseline",
        "demand-mmap",
        "demand-prefetch",
        "demand-prefill",
        "expert-lru",
        "expert-least-stale",
        "expert-belady",
    ]
    assert p.variant("demand-prefill").args == ("--prefetch-experts", "--prefill-readers", "8")
    assert p.sweep is not None and [m.text for m in p.sweep.memory] == ["8GiB"]
    assert p.experimental == ("0004-expert-cache.patch",)
    assert p.routes is not None and p.routes.synth is not None and p.routes.layers is None
    assert all(v.routes == p.routes.file for v in p.variants)
    assert [v.name for v in p.variants if v.future] == ["expert-belady"]
    assert p.variants[-1].future == "demand-mmap"
    made = make_routes(p.routes, tmp_path)
    assert made is not None and sha256_file(made) == p.routes.sha256
    head = struct.unpack_from("<8s7I", made.read_bytes())
    assert head[1:] == (1, 40, 256, 8, 40, 45, 64)
    assert len(p.schedule.prompt.encode()) == 45 and p.schedule.n_predict == 64


def test_the_qwen3_30b_prefill_sweep_is_its_shape_with_the_long_prompt_and_uncalibrated_routes(
    tmp_path: Path,
) -> None:
    """Issue 53's long prompt at the Qwen3-30B-A3B shape: qwen3-30b-shape's model and limits,
    qwen35-shape-8g-prefill's 534-token prompt and variants, routes synthesized with the profile's
    own knobs (the shape has no calibrated fit) for 534 + 32 tokens, no experimental patch."""
    shape, prefill = load_profile("qwen3-30b-shape"), load_profile("qwen3-30b-shape-prefill")
    qwen35 = load_profile("qwen35-shape-8g-prefill")
    assert prefill.model == shape.model and prefill.limits == shape.limits
    assert prefill.engine_args == shape.engine_args and prefill.experimental == ()
    assert prefill.schedule.prompt == qwen35.schedule.prompt
    assert [v.name for v in prefill.variants] == ["baseline", "demand-prefetch", "demand-prefill"]
    for variant in prefill.variants:
        assert variant == dataclasses.replace(shape.variant(variant.name), routes=prefill.routes.file)
    synth = prefill.routes.synth
    assert synth is not None and synth.knobs and (synth.layers, synth.experts, synth.k) == (48, 128, 6)
    made = make_routes(prefill.routes, tmp_path)
    assert made is not None and sha256_file(made) == prefill.routes.sha256
    head = struct.unpack_from("<8s7I", made.read_bytes())
    assert head[1:] == (1, 48, 128, 6, 48, 534, 32)


def test_the_prefill_sweep_is_qwen35_shape_8g_with_a_prompt_of_two_micro_batches(tmp_path: Path) -> None:
    """Issue 53's sweep: the same model and calibrated routing, made for a 534-token prompt (two
    micro-batches of 512, one token per byte), demand prefetch beside the prefill readers at
    exactly 8 GiB and the baseline as the warm reference; no experimental patch."""
    full, prefill = load_profile("qwen35-shape-8g"), load_profile("qwen35-shape-8g-prefill")
    assert prefill.model == full.model and prefill.limits == full.limits
    assert prefill.engine_args == full.engine_args and prefill.experimental == ()
    assert [v.name for v in prefill.variants] == ["baseline", "demand-prefetch", "demand-prefill"]
    for variant in prefill.variants:
        assert variant == dataclasses.replace(full.variant(variant.name), routes=prefill.routes.file)
    assert prefill.sweep is not None and [m.text for m in prefill.sweep.memory] == ["8GiB"]
    assert len(prefill.schedule.prompt.encode()) == 534 and "  " not in prefill.schedule.prompt
    made = make_routes(prefill.routes, tmp_path)
    assert made is not None and sha256_file(made) == prefill.routes.sha256
    head = struct.unpack_from("<8s7I", made.read_bytes())
    assert head[1:] == (1, 40, 256, 8, 40, 534, 32) and prefill.schedule.n_predict == 32


def test_the_verdict_sweep_is_qwen35_shape_8g_without_its_baseline() -> None:
    """Finding qwen35-shape-8g-expert-cache-cpu ran it: the same model, routes, limits, engine,
    schedule and variants, less the baseline (which measures the VM's read-ahead) and the prefill
    readers (patch 0006, newer than the finding). Its limits leave the read-ahead as found, as the
    finding ran; the full profile sets 128 KiB."""
    full, verdict = load_profile("qwen35-shape-8g"), load_profile("qwen35-shape-8g-verdict")
    later = ("baseline", "demand-prefill")
    assert [v for v in full.variants if v.name not in later] == list(verdict.variants)
    shared = ["model", "routes", "schedule", "sweep", "experimental", "engine_args", "gpu"]
    for field in [*shared, "target"]:
        assert getattr(verdict, field) == getattr(full, field), field
    assert verdict.limits == dataclasses.replace(full.limits, read_ahead_kb=None, read_ahead_mode="observe")


@pytest.mark.parametrize(("name", "layers"), [("qwen3-30b-shape", None), ("qwen3-30b-shape-slice", 2)])
def test_qwen3_30b_shape_is_the_gate_driven_by_the_public_trace(
    tmp_path: Path, name: str, layers: int | None
) -> None:
    """k = 6 as the trace; every variant forced from the routes file the profile makes from the
    fixture (its pinned sha256 comes out); the prompt is the trace's 28 tokens (one per byte in
    the synthetic vocabulary), decode within the trace's 128 steps."""
    p = load_profile(name)
    assert p.model.synth is not None and p.model.synth["used"] == 6
    assert p.routes is not None and p.routes.layers == layers
    assert p.routes.source == "tests/fixtures/real-routes/qwen3-30b-a3b-q4_k_m.route.csv"
    assert all(v.routes == p.routes.file for v in p.variants)
    made = make_routes(p.routes, tmp_path)
    assert made == tmp_path / p.routes.file and sha256_file(made) == p.routes.sha256
    assert check_routes(p.routes, tmp_path) == made and make_routes(p.routes, tmp_path) is None
    head = struct.unpack_from("<8s7I", made.read_bytes())
    assert head[1:5] == (1, layers or 48, 128, 6) and head[5] == (layers or 48)
    n_prompt, n_decode = head[6:8]
    assert (n_prompt, n_decode) == (28, 128)
    assert len(p.schedule.prompt.encode()) == n_prompt and "  " not in p.schedule.prompt
    assert p.schedule.n_predict <= n_decode
    if layers is None:
        assert p.schedule.n_predict >= 64 and p.experimental == ("0004-expert-cache.patch",)
        assert [v.name for v in p.variants] == [
            "baseline",
            "demand-mmap",
            "demand-prefetch",
            "demand-prefill",
            "expert-lru",
            "expert-least-stale",
            "expert-belady",
            "expert-lru-ahead4",
            "expert-belady-ahead4",
        ]
        # the oracle lookahead variants read the demand-mmap trial's trace as their future
        ahead = [v for v in p.variants if v.name.endswith("-ahead4")]
        assert all(v.future == "demand-mmap" and "--expert-lookahead" in v.args for v in ahead)


def test_a_routes_file_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    pinned = load_profile("qwen3-30b-shape-slice").routes
    assert pinned is not None
    with pytest.raises(
        ApplianceError,
        match=r"^routes file qwen3-30b-a3b-real\.l2\.routes not found in .*; "
        r"make it with: appliance trace import tests/fixtures/real-routes/qwen3-30b-a3b-q4_k_m\.route\.csv "
        r"--from route-trace-csv --out .*\.moetrace && appliance trace routes .* --layers 2 --out ",
    ):
        check_routes(pinned, tmp_path)
    other = dataclasses.replace(pinned, sha256="0" * 64)
    with pytest.raises(
        IntegrityError,
        match=f"^routes made from {pinned.source} have sha256 {pinned.sha256}, "
        "the profile pins 0{64}: the trace, its synth or the routes format changed; nothing written$",
    ):
        make_routes(other, tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / pinned.file).write_bytes(b"MOEROUTE")
    with pytest.raises(
        IntegrityError,
        match=f"^routes file {tmp_path / pinned.file} has sha256 [0-9a-f]{{64}}, "
        f"the profile pins {pinned.sha256}; delete it to remake it from {pinned.source}$",
    ):
        check_routes(pinned, tmp_path)


def test_a_routes_section_no_variant_forces_is_refused(tmp_path: Path) -> None:
    raw = yaml.safe_load((PROFILES_DIR / "qwen3-30b-shape-slice.yaml").read_text())
    for variant in raw["variants"]:
        del variant["routes"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(
        ConfigError,
        match=f"^{re.escape(str(path))}: /routes/file: no variant forces qwen3-30b-a3b-real.l2.routes; "
        "name it in a variant's routes$",
    ):
        load_profile(str(path))


def test_qwen35_8g_is_the_published_experiment() -> None:
    p = load_profile("qwen35-8g")
    assert p.model.file == "Qwen3.5-35B-A3B-UD-IQ4_NL.gguf"
    assert p.model.bytes == 17_821_719_168
    assert p.model.sha256 == "6aec31ed654fbf12f9950c98bab0a09faea433ffdc4b3acfeb55a1f050e3e444"
    assert (p.limits.memory, p.limits.swap, p.limits.memswap) == (8 * GIB, 0, 8 * GIB)
    assert (p.target, p.gpu) == ("auto", "required")
    assert [v.name for v in p.variants] == ["baseline", "demand-mmap"]
    assert p.variant("demand-mmap").env == {"LLAMA_MMAP_DEMAND": "1"}
    assert p.variant("baseline").env == {}
    assert (p.schedule.n_predict, p.schedule.repeats, p.schedule.order) == (128, 3, "interleaved")
    assert p.schedule.cold_cache is True


def test_qwen3_30b_16_leaves_the_digest_unpinned_and_says_so() -> None:
    p = load_profile("qwen3-30b-16")
    assert p.model.sha256 is None and not p.model.pinned
    assert p.schedule.n_predict == 16
    assert "not pinned" in p.source_text and "not pinned" in p.description


def test_tiny_oversub_records_synth_parameters_and_oversubscribes_twice() -> None:
    p = load_profile("tiny-oversub")
    assert (p.target, p.gpu) == ("cpu", "none")
    synth = p.model.synth
    assert synth is not None
    assert set(synth) >= {"arch", "size", "experts", "used", "layers", "skew", "seed", "type"}
    assert parse_size(synth["size"]) == 2 * p.limits.memory
    args = p.model.synth_args()
    assert args[:2] == ["--arch", "qwen3moe"] and "--skew" in args and len(args) == 16
    assert load_profile("qwen35-8g").model.synth_args() == []
    assert [v.name for v in p.variants][:2] == ["baseline", "demand-mmap"]


def test_interleaved_plan_alternates_variants_per_round() -> None:
    names = [t.name for t in trial_plan(load_profile("qwen35-8g"))]
    assert names == [
        "001-baseline-r1",
        "002-demand-mmap-r1",
        "003-baseline-r2",
        "004-demand-mmap-r2",
        "005-baseline-r3",
        "006-demand-mmap-r3",
    ]
    assert len(trial_plan(load_profile("qwen35-8g"), repeats=1)) == 2


def _write(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    edit(raw)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_user_file_is_accepted_by_path(tmp_path: Path) -> None:
    path = _write(tmp_path, lambda r: r.update(name="mine"))
    profile = load_profile(str(path))
    assert profile.name == "mine" and profile.source_path == path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.update(colour="blue"), "/colour: unknown field"),
        (lambda r: r["model"].update(checksum="x"), "/model/checksum: unknown field"),
        (lambda r: r["variants"][0].update(extra=1), "/variants/0/extra: unknown field"),
        (lambda r: r["schedule"].update(warmup=1), "/schedule/warmup: unknown field"),
        (lambda r: r["model"].update(sha256="ABC"), "/model/sha256"),
        (lambda r: r["schedule"].update(order="random"), "/schedule/order"),
        (lambda r: r["schedule"].update(repeats=0), "/schedule/repeats: must be at least 1"),
        (lambda r: r["schedule"].update(repeats=100000000), "/schedule/repeats: must be at most 1000"),
        (lambda r: r["schedule"].update(seed=-1), "/schedule/seed: must be at least 0"),
        (lambda r: r["limits"].update(memory="lots"), "/limits/memory"),
        (lambda r: r["variants"].append(r["variants"][0]), "appears twice"),
        (
            lambda r: r["variants"][1]["env"].update(LLAMA_MMAP_DEMAND=1),
            "/variants/1/env/LLAMA_MMAP_DEMAND: expected string, got integer",
        ),
        (lambda r: r.update(gpu="required"), "a cpu target cannot require a GPU"),
        (lambda r: r.update(gpu="stand-in"), "/limits/vram: gpu stand-in needs the device's size"),
        (lambda r: r.update(gpu="stand-in", target="sm120"), "/gpu: target sm120 runs on a GPU"),
        (lambda r: r.update(gpu="cuda"), "/gpu"),
        (
            lambda r: r["model"].update(file="../escape.gguf"),
            "/model/file: '../escape.gguf' is not a plain file name",
        ),
    ],
)
def test_bad_profiles_are_refused_naming_the_field(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_profile(str(_write(tmp_path, edit)))
    assert message in str(info.value)
    assert str(tmp_path / "p.yaml") in str(info.value)


def test_impossible_limit_names_the_number_the_engine_needs(tmp_path: Path) -> None:
    path = _write(tmp_path, lambda r: r["limits"].update(memory="32MiB"))
    with pytest.raises(ConfigError, match="32 MiB is impossible") as info:
        load_profile(str(path))
    assert "32 MiB is impossible" in str(info.value)
    assert "64 MiB (67108864 bytes)" in str(info.value)


def test_cli_refuses_an_unknown_key_with_exit_2_and_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, lambda r: r.update(colour="blue"))
    result = run_cli("run", str(path), "--models", str(tmp_path), "--dry-run")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "/colour: unknown field" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_profile_name_lists_the_builtins(tmp_path: Path) -> None:
    known = "qwen35-8g, qwen35-shape-8g, qwen35-shape-8g-prefill, qwen35-shape-8g-verdict, qwen35-shape-slice"
    with pytest.raises(ConfigError, match=known):
        load_profile("no-such-profile")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8GiB", 8 * GIB),
        ("200MiB", 200 << 20),
        ("0", 0),
        (4096, 4096),
        ("1.5GiB", 3 * GIB // 2),
        ("2GB", 2_000_000_000),
    ],
)
def test_sizes_parse(text: object, value: int) -> None:
    assert parse_size(text) == value


def test_sizes_format_for_people() -> None:
    assert format_size(8 * GIB, trim=True) == "8 GiB"
    assert format_size(200 << 20, trim=True) == "200 MiB"
    assert format_size(17_821_719_168, trim=True) == "16.6 GiB"


def test_tiny_oversub_cache_is_tiny_oversub_with_the_cache_variants() -> None:
    cache, plain = load_profile("tiny-oversub-cache"), load_profile("tiny-oversub")
    assert (cache.model, cache.limits, cache.engine_args) == (plain.model, plain.limits, plain.engine_args)
    assert cache.schedule == dataclasses.replace(plain.schedule, repeats=1, n_predict=64)
    assert cache.experimental == ("0004-expert-cache.patch",) and plain.experimental == ()
    assert cache.variants[:3] == plain.variants
    for policy in ("lru", "least-stale", "belady"):
        variant = cache.variant(f"expert-{policy}")
        assert variant.env == {"LLAMA_MMAP_DEMAND": "1"}
        assert variant.args == ("--expert-cache", policy, "--expert-cache-capacity", "auto")
        assert variant.future == ("demand-mmap" if policy == "belady" else None)


def test_tiny_oversub_prefill_is_tiny_oversub_with_a_long_prompt_and_the_readers() -> None:
    prefill, plain = load_profile("tiny-oversub-prefill"), load_profile("tiny-oversub")
    long_prompt = load_profile("qwen35-shape-8g-prefill").schedule.prompt
    assert (prefill.model, prefill.limits) == (plain.model, plain.limits)
    assert prefill.engine_args == plain.engine_args
    assert prefill.schedule == dataclasses.replace(plain.schedule, prompt=long_prompt)
    assert len(long_prompt) == 534 and prefill.experimental == ()
    assert prefill.variants[:3] == plain.variants
    readers = prefill.variant("demand-prefill")
    assert readers.env == {"LLAMA_MMAP_DEMAND": "1"}
    assert readers.args == ("--prefetch-experts", "--prefill-readers", "8")
    assert prefill.sweep is not None and plain.sweep is not None
    assert prefill.sweep.memory == (plain.sweep.memory[0], plain.sweep.memory[-1])


@pytest.mark.parametrize(
    ("future", "message"),
    [
        ("demand-prefetch", "/variants/1/future: 'demand-prefetch' is not a variant before this one"),
        ("demand-mmap", "/variants/1/future: 'demand-mmap' is not a variant before this one"),
        ("nothing", "/variants/1/future: 'nothing' is not a variant before this one"),
    ],
)
def test_a_future_must_name_an_earlier_variant(tmp_path: Path, future: str, message: str) -> None:
    path = _write(tmp_path, lambda r: r["variants"][1].update(future=future))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_profile(str(path))


def test_a_future_needs_traces(tmp_path: Path) -> None:
    def edit(raw: dict) -> None:  # type: ignore[type-arg]
        raw["variants"][1]["future"] = "baseline"
        raw["trace"] = False

    with pytest.raises(ConfigError, match=re.escape("/variants/1/future: needs trace: true")):
        load_profile(str(_write(tmp_path, edit)))


def _profile_with(tmp_path: Path, sweep: object) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["sweep"] = sweep
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _synth_routes_profile(tmp_path: Path, synth: dict, **routes: object) -> Path:
    """qwen35-shape-slice forcing routes made from `synth` (a profile written to tmp_path)."""
    raw = yaml.safe_load((PROFILES_DIR / "qwen35-shape-slice.yaml").read_text())
    raw["routes"] = {"file": "s.routes", "sha256": "0" * 64, "synth": synth, "layers": 4} | routes
    for variant in raw["variants"]:
        variant["routes"] = "s.routes"
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


def test_routes_from_a_calibrated_synth_are_the_same_bytes_every_time(tmp_path: Path) -> None:
    """routes.synth: the profile's prompt's bytes as prompt tokens; made twice (two directories),
    the same bytes, which are the routes of `trace synth --calibrated` of that spec; a wrong pin
    is refused before a byte is written."""
    shape = {"layers": 40, "experts": 256, "k": 8, "decode": 8}
    p = load_profile(str(_synth_routes_profile(tmp_path, shape)))
    assert p.routes is not None and p.routes.synth is not None and p.routes.source is None
    assert p.routes.synth.prompt == len(p.schedule.prompt.encode()) == 19 and p.routes.synth.seed == 0
    with pytest.raises(
        IntegrityError,
        match=r"^routes made from a calibrated synthetic trace \(40 layers x 256 experts, k = 8, 19 prompt "
        r"\+ 8 decode tokens, seed 0\) have sha256 [0-9a-f]{64}, the profile pins 0{64}: the trace, its "
        "synth or the routes format changed; nothing written$",
    ) as refused:
        make_routes(p.routes, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    digest = re.search(r"sha256 ([0-9a-f]{64})", str(refused.value)).group(1)  # type: ignore[union-attr]
    pinned = dataclasses.replace(p.routes, sha256=digest)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    made = make_routes(pinned, tmp_path / "a")
    assert made is not None and make_routes(pinned, tmp_path / "b") is not None
    assert made.read_bytes() == (tmp_path / "b" / "s.routes").read_bytes()
    assert check_routes(pinned, tmp_path / "a") == made
    head = struct.unpack_from("<8s7I", made.read_bytes())
    assert head[1:] == (1, 4, 256, 8, 4, 19, 8)  # the first 4 of 40 layers (layers: 4)
    trace = tmp_path / "t.moetrace"
    run_cli("trace", "synth", str(trace), "--calibrated", "--layers", "40", "--experts", "256", "--k", "8",
            "--prompt", "19", "--decode", "8", check=True)  # fmt: skip
    run_cli("trace", "routes", str(trace), "--layers", "4", "--out", str(tmp_path / "cli.routes"), check=True)
    assert (tmp_path / "cli.routes").read_bytes() == made.read_bytes()


def test_routes_from_a_synth_with_the_profiles_own_knobs_say_they_are_not_calibrated(tmp_path: Path) -> None:
    """routes.synth.knobs, for a shape without a calibrated fit (48 x 128 x 6 has none): the
    routes are those of `trace synth` with these knobs, named in every message, and the printed
    commands make the same bytes; an unknown knob is refused naming the field."""
    knobs = {"skew": 1.35, "recall": 0.5, "recall_window": 10}
    shape = {"layers": 48, "experts": 128, "k": 6, "decode": 8, "knobs": knobs}
    p = load_profile(str(_synth_routes_profile(tmp_path, shape)))
    assert p.routes is not None and p.routes.synth is not None
    assert p.routes.synth.knobs == (("skew", 1.35), ("recall", 0.5), ("recall_window", 10))
    assert p.routes.origin == (
        "a synthetic trace with the profile's knobs, not a calibrated fit (48 layers x 128 experts, "
        "k = 6, 19 prompt + 8 decode tokens, seed 0; skew 1.35, recall 0.5, recall_window 10)"
    )
    with pytest.raises(IntegrityError, match=r"^routes made from a synthetic trace with the profile's knobs"):
        make_routes(p.routes, tmp_path / "a")
    with pytest.raises(ApplianceError, match="make it with: appliance trace synth") as missing:
        check_routes(p.routes, tmp_path)
    commands = str(missing.value).split("make it with: ", 1)[1]
    assert commands.split(" && ")[0].split()[4:10] == [
        "--skew",
        "1.35",
        "--recall",
        "0.5",
        "--recall-window",
        "10",
    ]
    assert "--calibrated" not in commands
    synth_cmd, routes_cmd = (part.split()[1:] for part in commands.split(" && "))
    run_cli(*synth_cmd, check=True)
    run_cli(*routes_cmd, check=True)
    made = (tmp_path / "s.routes").read_bytes()
    pinned = dataclasses.replace(p.routes, sha256=sha256_file(tmp_path / "s.routes"))
    (tmp_path / "b").mkdir()
    remade = make_routes(pinned, tmp_path / "b")
    assert remade is not None and remade.read_bytes() == made
    calibrated_shape = {"layers": 40, "experts": 256, "k": 8, "decode": 8}
    calibrated = load_profile(str(_synth_routes_profile(tmp_path / "b", calibrated_shape)))
    assert calibrated.routes is not None and calibrated.routes.synth is not None
    assert calibrated.routes.synth.knobs == ()
    with pytest.raises(ConfigError, match=r"/routes/synth/knobs/heat: unknown field"):
        load_profile(str(_synth_routes_profile(tmp_path / "b", shape | {"knobs": {"heat": 1.0}})))


@pytest.mark.parametrize(
    ("synth", "routes", "message"),
    [
        (
            {"layers": 40, "experts": 256, "k": 8, "decode": 8},
            {"from": "tests/fixtures/real-routes/qwen3-30b-a3b-q4_k_m.route.csv"},
            "/routes: give exactly one of from: (a route trace in the checkout) and synth: (a calibrated "
            "synthetic trace)",
        ),
        (
            None,
            {},
            "/routes: give exactly one of from: (a route trace in the checkout) and synth: (a calibrated "
            "synthetic trace)",
        ),
        (
            {"layers": 40, "experts": 256, "k": 8, "decode": 7},
            {},
            "/routes/synth/decode: 7 decode tokens, but a run of this profile decodes 8; route forcing "
            "needs routes for every token",
        ),
    ],
)
def test_routes_need_exactly_one_source_and_enough_decode(
    tmp_path: Path, synth: dict | None, routes: dict, message: str
) -> None:
    path = _synth_routes_profile(tmp_path, synth or {}, **routes)
    if synth is None:
        raw = yaml.safe_load(path.read_text())
        del raw["routes"]["synth"]
        path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: {re.escape(message)}$"):
        load_profile(str(path))


def test_routes_synth_of_an_uncalibrated_shape_is_refused_in_one_line(tmp_path: Path) -> None:
    shape = {"layers": 40, "experts": 256, "k": 6, "decode": 8}
    p = load_profile(str(_synth_routes_profile(tmp_path, shape)))
    assert p.routes is not None
    with pytest.raises(
        ConfigError,
        match=r"^no calibrated routing for 40 layers x 256 experts x k = 6 \(calibrated: 40 x 256 x 8\); "
        r"fit one with python -m bench.calibrate_synth --shape 40x256x6$",
    ):
        make_routes(p.routes, tmp_path)
    assert list(tmp_path.iterdir()) == [tmp_path / "p.yaml"]


def test_qwen35_shape_slice_forces_the_first_4_layers_of_calibrated_routes(tmp_path: Path) -> None:
    """The slice: the same calibrated synth as qwen35-shape-8g's routes (seed 1), its first 4
    layers, prompt its own 19 bytes; lru and belady (future: demand-mmap) at 64 experts."""
    p = load_profile("qwen35-shape-slice")
    assert p.routes is not None and p.routes.synth is not None and p.routes.layers == 4
    big = load_profile("qwen35-shape-8g").routes
    assert big is not None and dataclasses.replace(p.routes.synth, prompt=45) == big.synth
    assert [v.name for v in p.variants] == ["baseline", "demand-mmap", "expert-lru", "expert-belady"]
    assert all(v.routes == p.routes.file for v in p.variants) and p.experimental == (
        "0004-expert-cache.patch",
    )
    assert p.variants[-1].future == "demand-mmap"
    assert all(v.args[-2:] == ("--expert-cache-capacity", "64") for v in p.variants[2:])
    made = make_routes(p.routes, tmp_path)
    assert made is not None and sha256_file(made) == p.routes.sha256
    assert struct.unpack_from("<8s7I", made.read_bytes())[1:] == (1, 4, 256, 8, 4, 19, 64)


def test_select_variants_keeps_the_profiles_order_and_text() -> None:
    profile = load_profile("tiny-oversub-cache")
    chosen = select_variants(profile, ("expert-belady", "baseline", "demand-mmap"))
    assert [v.name for v in chosen.variants] == ["baseline", "demand-mmap", "expert-belady"]
    assert chosen.source_text == profile.source_text  # the bundle keeps the profile as written
    assert [t.variant.name for t in trial_plan(chosen, 1)] == ["baseline", "demand-mmap", "expert-belady"]
    assert select_variants(profile, ()) is profile


def test_select_variants_refuses_an_unknown_name_and_a_future_left_out() -> None:
    profile = load_profile("tiny-oversub-cache")
    with pytest.raises(ConfigError, match=r"no variant 'lfu', 'x': choose among baseline, demand-mmap, "):
        select_variants(profile, ("lfu", "baseline", "x"))
    with pytest.raises(
        ConfigError, match="expert-belady replays demand-mmap's route trace as its future: add demand-mmap"
    ):
        select_variants(profile, ("expert-belady",))


@pytest.mark.parametrize("spelling", [["--moe-cache-mib", "64"], ["--moe-cache-mib=64"]])
def test_upstreams_moe_cache_is_refused_on_the_canonical_tracks_images(
    tmp_path: Path, spelling: list[str]
) -> None:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-stand-in.yaml").read_text())
    raw["variants"].append({"name": "upstream-moe-cache", "args": ["--n-cpu-moe", "2", *spelling]})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    index = len(raw["variants"]) - 1
    with pytest.raises(
        ConfigError,
        match=f"^{re.escape(str(path))}: /variants/{index}/args: --moe-cache-mib: upstream's MoE expert "
        "cache exists only on the current track .*remove it from the profile$",
    ):
        load_profile(str(path))
