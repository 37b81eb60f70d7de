"""The expert cache through the appliance's own sweep: profile tiny-oversub-cache at its smallest
limit, on the cpu image with patch 0004, at miniature scale (32 decode steps).

Every cache trial's measured decode reads must be within 5% of its own policy's replay at the
capacity the tool chose, the tool's misses must be the replay's, and every trace and text must
be byte-identical to the baseline's; expert-belady's --future is the demand-mmap trial's trace,
mounted read-only and recorded with its digest.
"""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from appliance.runs.profile import PROFILES_DIR
from appliance.runs.run_dir import PROFILE_INPUT, SCHEDULE_INPUT, RunDir
from tests.conftest import run_cli
from tests.e2e.conftest import demo_model, private_demo_model, user_env

CACHE_VARIANTS = ("expert-lru", "expert-least-stale", "expert-belady")
N_PREDICT = 32


def miniature_profile(tmp_path: Path) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub-cache.yaml").read_text())
    raw["name"] = "tiny-oversub-cache-e2e"
    raw["sweep"] = {"memory": [0.25], "n_predict": N_PREDICT}
    path = tmp_path / "tiny-oversub-cache-e2e.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_the_sweep_runs_each_cache_policy_as_its_replay_predicts(
    engine_image_cpu_cache: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    result = run_cli(
        "sweep",
        str(miniature_profile(tmp_path)),
        "--models",
        str(private_demo_model("tiny-oversub-cache", tmp_path)),
        "--out",
        str(run),
        env=user_env(tmp_path),
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert engine_image_cpu_cache in result.stdout  # the image with 0004, found without --image
    assert "meas/replay" in result.stdout  # the expert cache's table
    assert json.loads((run / "run.json").read_text())["status"] == "complete"

    paths = sorted(run.glob("trials/*/trial.json"))
    records = {t["variant"]: t for t in (json.loads(p.read_text()) for p in paths)}
    assert list(records) == ["baseline", "demand-mmap", "demand-prefetch", *CACHE_VARIANTS]
    assert all(t["status"] == "ok" for t in records.values()), records
    belady, mmap = records["expert-belady"], records["demand-mmap"]
    mmap_trace = run / "trials" / mmap["name"] / "trace.moetrace"
    assert belady["future"] == {
        "trial": mmap["name"],
        "sha256": hashlib.sha256(mmap_trace.read_bytes()).hexdigest(),
    }
    command = belady["container"]["command"]
    assert command[command.index("--future") + 1] == "/future/trace.moetrace"
    assert "--future" not in records["expert-lru"]["container"]["command"]

    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True  # texts, at matched length
    cache = results["sweep"]["expert_cache"]
    assert cache["traces_identical"] is True and cache["tool_misses_equal_replay"] is True
    rows = {r["variant"]: r for r in cache["trials"]}
    assert all(r["trace_identical_to_baseline"] is True for r in rows.values())
    for variant in CACHE_VARIANTS:
        row = rows[variant]
        assert row["policy"] == variant.removeprefix("expert-")
        assert row["tool_decode_misses"] == row["replayed_decode_misses"] > 0, row
        assert abs(row["measured_over_replay"] - 1) <= 0.05, row
        assert row["reads_over_demand_mmap"] is not None and row["disk_fraction_qd8"] is not None
    # the planner's peak of a cache trial counts the experts its capacity holds at most: never
    # under the cgroup's, and under the limit, which the page cache's trials reach (at this scale
    # the planner's estimate of anonymous memory, not the pages, keeps it 11% over: docs/sweeps.md)
    placement = {row["variant"]: row for row in results["placement"]["trials"]}
    limit = records["demand-mmap"]["cgroup"]["limit_bytes"]
    for variant in CACHE_VARIANTS:
        row = placement[variant]
        assert "the expert cache holds" in row["planner_peak_pages"], row
        assert row["measured_peak_bytes"] <= row["planner_peak_bytes"] < limit, row
    # the bundle seals and verifies
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.docker
@pytest.mark.engine
def test_an_image_without_the_cache_patch_is_refused_in_one_line(
    engine_image_cpu: str, tmp_path: Path
) -> None:
    result = run_cli(
        "sweep",
        "tiny-oversub-cache",
        "--models",
        str(demo_model("tiny-oversub-cache").parent),  # nothing reads it: the image is refused first
        "--image",
        engine_image_cpu,
        "--skip-digest-check",
        "--out",
        str(tmp_path / "run"),
        env=user_env(tmp_path),
    )
    assert result.returncode != 0
    assert result.stderr == (
        f"error: image {engine_image_cpu} does not carry 0004-expert-cache.patch, which profile "
        "tiny-oversub-cache needs: build one with `appliance image build --target cpu "
        "--experimental 0004-expert-cache.patch`\n"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_a_sweep_of_some_variants_runs_and_seals_only_those(
    engine_image_cpu_cache: str, tmp_path: Path
) -> None:
    profile = miniature_profile(tmp_path)
    run = tmp_path / "run"
    result = run_cli(
        "sweep",
        str(profile),
        "--models",
        str(private_demo_model("tiny-oversub-cache", tmp_path)),
        "--variants",
        "expert-belady,demand-mmap",  # belady's future, demand-mmap, runs first as in the profile
        "--out",
        str(run),
        env=user_env(tmp_path),
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    layout = RunDir(run)
    schedule = json.loads(layout.input(SCHEDULE_INPUT).read_text())
    assert [v["name"] for v in schedule["variants"]] == ["demand-mmap", "expert-belady"]
    assert [json.loads(p.read_text())["variant"] for p in sorted(run.glob("trials/*/trial.json"))] == [
        "demand-mmap",
        "expert-belady",
    ]
    assert layout.input(PROFILE_INPUT).read_text() == profile.read_text()  # the whole profile, as written
    rows = json.loads((run / "results.json").read_text())["sweep"]["expert_cache"]["trials"]
    assert [r["variant"] for r in rows] == ["demand-mmap", "expert-belady"]
    belady = rows[1]
    assert belady["future_trial"] == rows[0]["trial"]
    assert belady["tool_decode_misses"] == belady["replayed_decode_misses"] > 0, belady
    assert abs(belady["measured_over_replay"] - 1) <= 0.05, belady
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
