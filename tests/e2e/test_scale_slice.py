"""A slice of each full-shape synthetic (the Qwen3.5-35B-A3B shape, its first 4 layers, the first
with attention; the Qwen3-30B-A3B shape, its first 2: every tensor of those layers at full
width, the whole embedding and output) through the whole pipeline (`appliance run` for one,
`appliance sweep` for the other) on the cpu image, under a limit below the file so that it pages.

The slice is synthesized into the test's directory from its profile's model.synth (so the
pinned size and sha256 must come out byte for byte), run with baseline and demand mmap, and
the sealed bundle verified: every trial completes, its trace has the slice's layers, experts
and k, the texts are identical across variants, decode reads the disk under the limit, and the
planner's predicted peak is within 5% of the measured one and never under it at the full
vocabularies. A profile with `routes:` gets its routes file made (the Qwen3-30B-A3B slice: the
public trace's first 2 layers, k = 6; the Qwen3.5 slice: the first 4 layers of a calibrated
synthetic trace), and every trial's trace holds exactly those routes. The Qwen3.5 slice also
runs the expert cache (patch 0004, its image found without --image): lru and belady, whose
future is the demand-mmap trial's trace, and whose misses are its replay's.
"""

import json
from pathlib import Path

import pytest
from rich.console import Console

from appliance.analysis.capacity import model_experts
from appliance.analysis.placement import GOAL_PCT
from appliance.analysis.sweep_analysis import phase_reads, predicted_reads, probe_summary
from appliance.models import skeleton
from appliance.runs.profile import load_profile
from appliance.runs.run_dir import RunDir
from appliance.runs.timing import load_timing
from appliance.runs.trial_time import model_trial_timeout_s
from appliance.trace.format import read_trace
from appliance.trace.routes import follows_routes
from appliance.workflows.run import ensure_synth_model, timeout_read_bps
from tests.conftest import run_cli
from tests.e2e.conftest import user_env

# (profile, verb): `appliance run` for one, `appliance sweep` at the profile's limit (its disk
# probe first, whose QD1 rate then sets the trials' timeout) for the other
SLICES = (("qwen35-shape-slice", "run"), ("qwen3-30b-shape-slice", "sweep"))


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize(("name", "verb"), SLICES)
def test_a_slice_of_the_full_shape_pages_through_the_pipeline(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, verb: str
) -> None:
    profile = load_profile(name)
    # the image with the profile's experimental patches (0004 for the Qwen3.5 slice's cache)
    image = request.getfixturevalue("engine_image_cpu_cache" if profile.experimental else "engine_image_cpu")
    synth = profile.model.synth
    assert synth is not None and profile.model.like is not None
    models = tmp_path / "models"
    model = ensure_synth_model(profile, models, Console(quiet=True))
    assert model.stat().st_size == profile.model.bytes
    assert profile.limits.memory < model.stat().st_size  # it must page

    run = tmp_path / "run"
    limit = [] if verb == "run" else ["--memory", f"{profile.limits.memory}B"]
    result = run_cli(
        verb, name, "--models", str(models), "--out", str(run), *limit, env=user_env(tmp_path), timeout=900
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert image in result.stdout
    run_record = json.loads((run / "run.json").read_text())
    assert run_record["status"] == "complete"
    assert run_record["model_digest_status"] == "verified"  # the pinned sha256, recreated
    # the timeout is derived from the model, the schedule and the sweep's disk probe (a run has
    # none: 200 MiB/s)
    probe = RunDir(run).read_probe()
    assert (probe is None) == (verb == "run")
    rate = timeout_read_bps(probe)
    if probe is not None:  # demand paging reads a page per fault: the probe's slowest rate
        assert rate == probe_summary(probe)["page_qd1_bytes_per_s"] > 0
    assert run_record["trial_timeout_s"] == pytest.approx(
        model_trial_timeout_s(model, profile.schedule, rate)
    )

    records = [json.loads(p.read_text()) for p in sorted(run.glob("trials/*/trial.json"))]
    assert [r["variant"] for r in records] == [v.name for v in profile.variants]
    assert all(r["status"] == "ok" for r in records), records

    doc = skeleton.load_input(skeleton.input_path(profile.model.like))
    cfg = doc["config"]
    n_experts = int(cfg["num_experts"])
    k = int(synth.get("used", cfg["num_experts_per_tok"]))
    forced = (models / profile.routes.file).read_bytes() if profile.routes is not None else None
    texts = set()
    for record in records:
        trial = run / "trials" / record["name"]
        trace = read_trace(trial / "trace.moetrace")
        assert trace.moe_layers == list(range(int(synth["layers"])))
        assert (trace.n_experts, trace.k) == (n_experts, k)
        assert trace.n_steps >= profile.schedule.n_predict
        assert int(trace.ids.max()) < n_experts
        if forced is not None:  # the engine took every choice from the routes file
            assert profile.routes is not None
            assert record["routes"] == {"file": profile.routes.file, "sha256": profile.routes.sha256}
            assert follows_routes(trace, forced), record["name"]
        texts.add((trial / "output.txt").read_bytes())
        timing = json.loads((trial / "timing.json").read_text())
        cache = timing.get("expert_cache")
        if cache is not None:  # the engine's cache misses exactly what its replay of the trace does
            assert (cache["policy"], cache["capacity"]) == (record["variant"].removeprefix("expert-"), 64)
            replay = predicted_reads(trace, cache["capacity"], model_experts(model, trace))["policies"]
            assert cache["decode"]["misses"] == replay[cache["policy"]]["decode_misses"], record["name"]
            assert cache["decode"]["evictions"] > 0, record["name"]
        reads = phase_reads(load_timing(trial / "timing.json"))
        assert reads is not None and reads["decode"] > 0, (record["name"], reads)
    assert len(texts) == 1  # greedy decoding: the same text whatever the paging

    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True
    # the sweep's replay of each trial's trace is the replay of the routes (`run` has no sweep
    # section: follows_routes above is its check)
    if forced is not None and verb == "sweep":
        assert [row["trace_equals_routes"] for row in results["sweep"]["trials"]] == [True] * len(records)
    # the planner's peak at these vocabularies (248,320 and 151,936 tokens): within 5% of the
    # cgroup's and never under, for every trial (a demand-mapped one from its own trace, an
    # expert cache's from the experts its capacity holds at most: planner.cache_pages)
    placement = results["placement"]
    peaks = {row["trial"]: row["error_pct"]["peak"] for row in placement["trials"]}
    assert sorted(peaks) == sorted(r["name"] for r in records)
    assert all(0 <= pct <= GOAL_PCT for pct in peaks.values()), peaks
    cached = [row for row in placement["trials"] if row["variant"].startswith("expert-")]
    assert len(cached) == (2 if profile.experimental else 0)
    assert all("the expert cache holds" in row["planner_peak_pages"] for row in cached)
    verified = run_cli("bundle", "verify", str(run), env=user_env(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
