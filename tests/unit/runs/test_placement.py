"""Profiles say where the model lives: limits.vram, placement, the arguments each trial gets,
the refusals before any container starts, and dry runs for a GPU that is not here."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.planner.accounting import account_file
from appliance.planner.offload import Offload
from appliance.planner.plan import PlanLimits, PlanVerdict, make_plan
from appliance.runs.placement import Placement, offload_of, placement_text, planned_args
from appliance.runs.profile import PROFILES_DIR
from tests.conftest import REPO, run_cli
from tests.unit.runs.test_profile_strict import TINY, refused, write

GiB = 1 << 30
QWEN35 = (PROFILES_DIR / "qwen35-8g.yaml").read_text()
QWEN35_INPUT = REPO / "evidence" / "plans" / "qwen35-35b-a3b-ud-iq4_nl.input.json"
QWEN35_FILE = "Qwen3.5-35B-A3B-UD-IQ4_NL.gguf"
# what the planner gives the pinned Qwen3.5-35B-A3B file for 8 GiB RAM and 4 GiB of VRAM:
# all 40 layers' dense parts, the output head (llama.cpp's 41st offload slot) and the last
# layer's experts on the GPU (`appliance plan SKELETON --ram 8GiB --vram 4GiB` prints the same)
QWEN35_PLAN = "-ngl 41 --n-cpu-moe 39"
# the profile's own trials: llama-moe-trace allocates a context of its prompt and 128 decode
# tokens, not 4096 (runs.placement.engine_context), so the smaller KV cache leaves room on the
# GPU for one more layer's experts
QWEN35_RUN_PLAN = "-ngl 41 --n-cpu-moe 38"


@pytest.fixture(scope="module")
def skeleton(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding a header-only skeleton of qwen35-8g's file."""
    models = tmp_path_factory.mktemp("models")
    run_cli("model", "skeleton", str(QWEN35_INPUT), str(models / QWEN35_FILE), check=True)
    return models


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("  swap: 0\n", "  swap: 0\n  vram: lots\n", "/limits/vram: cannot read size 'lots'"),
        ("trace: true\n", "trace: true\nplacement: plan\n", "/placement: plan needs limits.vram"),
        (
            "trace: true\n",
            "trace: true\nplacement: gpu\n",
            "/placement: 'gpu' is not one of auto, cpu-moe, plan (or a list of engine arguments)",
        ),
        (
            "trace: true\n",
            "trace: true\nplacement: [--n-cpu-moe, '-1']\n",
            "/placement: --n-cpu-moe must be a whole number >= 0 (got '-1')",
        ),
        (
            "trace: true\n",
            "trace: true\nplacement: []\n",
            "/placement: an explicit placement needs engine arguments (or choose auto)",
        ),
        (
            '  args: ["--no-repack"]\n',
            '  args: ["--no-repack", "-ot", "exps"]\n',
            "/engine/args: -ot 'exps' is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')",
        ),
        (
            '  args: ["--no-repack"]\n',
            '  args: ["--no-repack", "-ot", "blk[=CPU"]\n',
            "/engine/args: -ot pattern 'blk[' is not a valid regular expression: ",
        ),
        (
            '  args: ["--no-repack"]\n',
            '  args: ["--no-repack", "-ngl"]\n',
            "/engine/args: -ngl needs a value",
        ),
    ],
)
def test_bad_placement_is_refused_in_one_line_naming_the_field(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    assert old in TINY
    assert refused(tmp_path, write(tmp_path, TINY.replace(old, new, 1))).startswith(problem)


def test_each_mode_gives_its_arguments(skeleton: Path) -> None:
    acc = account_file(skeleton / QWEN35_FILE)
    here = Path("p.yaml")
    assert planned_args(Placement("auto"), None, 8 * GiB, None, here) == ()
    assert planned_args(Placement("cpu-moe"), None, 8 * GiB, None, here) == ("-ngl", "999", "--cpu-moe")
    explicit = Placement(None, ("-ngl", "20", "-ot", "exps=CPU"))
    assert planned_args(explicit, None, 8 * GiB, None, here) == explicit.args
    assert " ".join(planned_args(Placement("plan"), acc, 8 * GiB, 4 * GiB, here)) == QWEN35_PLAN
    # a budget with room for nothing but the CUDA context: every expert stays on the host
    assert planned_args(Placement("plan"), acc, 8 * GiB, 2 * GiB, here) == ("-ngl", "3", "--cpu-moe")
    assert placement_text(Placement("auto"), ()) == "auto: no arguments (llama.cpp's default placement)"


def test_a_placement_the_planner_cannot_satisfy_is_refused(skeleton: Path) -> None:
    acc = account_file(skeleton / QWEN35_FILE)
    with pytest.raises(ConfigError, match=r"^p\.yaml: /placement: the planner cannot place ") as caught:
        planned_args(Placement("plan"), acc, 8 * GiB, 512 << 20, Path("p.yaml"))
    plan = make_plan(acc, PlanLimits(ram_bytes=8 * GiB, vram_bytes=512 << 20))
    assert plan.verdict is PlanVerdict.DOES_NOT_START and plan.reason.startswith("even with every routed")
    assert str(caught.value) == (
        f"p.yaml: /placement: the planner cannot place {QWEN35_FILE} under 8 GiB RAM and limits.vram "
        f"512 MiB: {plan.reason}"
    )


@pytest.mark.parametrize(("gpu", "target"), [("8.9:24GiB", "sm89"), ("12.0:32GiB", "sm120")])
def test_dry_run_on_a_skeleton_prints_each_trials_placement(skeleton: Path, gpu: str, target: str) -> None:
    result = run_cli(
        "run", "qwen35-8g", "--models", str(skeleton), "--dry-run", "--skeleton", "--assume-gpu", gpu
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "SKELETON (--skeleton): a header-only file stands for the pinned 17,821,719,168 bytes" in out
    assert f"target      {target};" in out
    assert f"GPU memory  budget 4 GiB on GPU 0 assumed GPU (compute capability {gpu.split(':')[0]}" in out
    assert out.count(f"plan: {QWEN35_RUN_PLAN} (SKELETON)") == 6  # every trial, 2 variants x 3 repeats
    assert out.count(f"{QWEN35_RUN_PLAN}\n") == 2  # each variant's docker run ends with it
    assert out.count("(model is a SKELETON: shown, cannot run):") == 2


def test_sweep_dry_run_prints_the_placement_of_each_limit(skeleton: Path) -> None:
    result = run_cli(
        "sweep",
        "qwen35-8g",
        "--models",
        str(skeleton),
        "--dry-run",
        "--skeleton",
        "--assume-gpu",
        "8.9:24GiB",
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "GiB (" in line and "│" in line]
    assert len(rows) == 4 and all(f"plan: {QWEN35_RUN_PLAN} (SKELETON)" in row for row in rows)


def test_a_budget_larger_than_the_gpu_is_refused_before_anything_starts(skeleton: Path) -> None:
    result = run_cli(
        "run", "qwen35-8g", "--models", str(skeleton), "--dry-run", "--skeleton", "--assume-gpu", "8.9:2GiB"
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {PROFILES_DIR / 'qwen35-8g.yaml'}: /limits/vram: 4 GiB is more than GPU 0 (assumed GPU "
        "(compute capability 8.9, 2 GiB)) has (2 GiB): lower the budget or use a larger GPU\n"
    )


def test_auto_placement_on_a_gpu_that_holds_the_model_warns(tmp_path: Path, skeleton: Path) -> None:
    text = QWEN35.replace("placement: plan\n", "placement: auto\n")
    assert text != QWEN35
    profile = write(tmp_path, text.replace("name: qwen35-8g\n", "name: qwen35-8g-auto\n"))
    result = run_cli(
        "run",
        str(profile),
        "--models",
        str(skeleton),
        "--dry-run",
        "--skeleton",
        "--assume-gpu",
        "12.0:32GiB",
    )
    assert result.returncode == 0, result.stderr
    assert (
        "placement auto: the whole model (16.6 GiB) fits in GPU 0's free 32 GiB, so llama.cpp may hold it in "
        "VRAM and the RAM limit will not be exercised"
    ) in " ".join(result.stdout.split())
    assert result.stdout.count("auto: no arguments (llama.cpp's default placement) (SKELETON)") == 6


@pytest.mark.parametrize("flag", [("--assume-gpu", "8.9:24GiB"), ("--skeleton",)])
def test_dry_run_only_flags_need_a_dry_run(skeleton: Path, flag: tuple[str, ...]) -> None:
    result = run_cli("run", "qwen35-8g", "--models", str(skeleton), *flag)
    assert result.returncode == 2
    assert f"error: {flag[0]} needs --dry-run: " in result.stderr


def test_placement_options_give_the_offload_or_none_where_not_modelled() -> None:
    assert offload_of(("-ngl", "5", "--n-cpu-moe", "2"), 4) == Offload(0, True, 2)
    assert offload_of(("--n-gpu-layers", "3", "-ncmoe", "1"), 4) == Offload(2, True, 1)
    assert offload_of(("-ngl", "999", "--cpu-moe"), 4) == Offload(0, True, 4)
    assert offload_of((), 4) == Offload(5, False, 0)  # nothing offloaded
    assert offload_of(("-ngl", "-1"), 4) is None  # llama.cpp's own choice
    assert offload_of(("-ngl", "5", "-ot", "ffn_.*_exps=CPU"), 4) is None  # overrides
