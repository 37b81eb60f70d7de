"""model.synth with `like`: a profile names a skeleton input (by name or repo-relative path),
seed, skew and layers, and gets `appliance model synth --like` options that recreate the file."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.models.skeleton import input_path
from appliance.runs.profile import load_profile
from tests.conftest import REPO
from tests.unit.runs.test_profile_strict import TINY, refused, write

LIKE_30B = "    like: qwen3-30b-a3b-q4_k_m\n"
PLANS = REPO / "evidence" / "plans"
TINY_SYNTH = TINY[TINY.index("  synth:\n") : TINY.index("target:")]


def like_profile(synth: str) -> str:
    return TINY.replace(TINY_SYNTH, "  synth:\n" + synth)


def test_an_input_is_named_by_its_name_or_its_path_in_the_checkout() -> None:
    by_name = input_path("qwen3-30b-a3b-q4_k_m")
    assert by_name == PLANS / "qwen3-30b-a3b-q4_k_m.input.json"
    assert input_path("evidence/plans/qwen3-30b-a3b-q4_k_m.input.json") == by_name
    message = r"^skeleton input 'qwen9' not found \(looked for .*qwen9\.input\.json\)"
    with pytest.raises(ConfigError, match=message):
        input_path("qwen9")


def test_a_like_synth_becomes_the_options_of_model_synth_like(tmp_path: Path) -> None:
    text = like_profile("    like: qwen3-30b-a3b-q4_k_m\n    seed: 3\n    skew: 0.5\n    layers: 2\n")
    profile = load_profile(str(write(tmp_path, text)))
    assert profile.model.like == "qwen3-30b-a3b-q4_k_m"
    assert profile.model.synth_args() == [
        "--like",
        str(PLANS / "qwen3-30b-a3b-q4_k_m.input.json"),
        "--seed",
        "3",
        "--skew",
        "0.5",
        "--layers",
        "2",
    ]
    assert load_profile("tiny-oversub").model.like is None


def test_a_missing_input_is_named_when_the_model_is_to_be_made(tmp_path: Path) -> None:
    profile = load_profile(str(write(tmp_path, like_profile("    like: nothing-here\n"))))
    with pytest.raises(ConfigError, match=r"^skeleton input 'nothing-here' not found"):
        profile.model.synth_args()


@pytest.mark.parametrize(
    ("synth", "problem"),
    [
        (
            "    like: qwen3-30b-a3b-q4_k_m\n    experts: 8\n",
            "/model/synth/experts: not an option of a full-shape synthetic "
            "(`like` takes like, seed, skew, layers, used, router)",
        ),
        (LIKE_30B + "    router: clustered\n", "/model/synth/router: 'clustered' is not one of walk, zipf"),
        (LIKE_30B + "    seed: '1'\n", "/model/synth/seed: '1' has the wrong type"),
        (LIKE_30B + "    layers: true\n", "/model/synth/layers: True has the wrong type"),
    ],
)
def test_a_bad_like_synth_is_refused_with_its_field(tmp_path: Path, synth: str, problem: str) -> None:
    assert refused(tmp_path, write(tmp_path, like_profile(synth))).startswith(problem)
