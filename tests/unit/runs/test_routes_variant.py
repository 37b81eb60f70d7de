"""A profile variant's `routes`: the routes file beside the model, passed as --routes-from, its
sha256 recorded per trial; a missing file or a profile without traces is refused in one line."""

import re
from pathlib import Path

import pytest
import yaml

from appliance.core.digests import sha256_bytes
from appliance.core.errors import ConfigError
from appliance.runs.model_files import routes_record
from appliance.runs.plan import ContainerSettings, LlamaMoeTraceEngine, container_spec, trial_plan
from appliance.runs.profile import PROFILES_DIR, load_profile
from appliance.runs.record import schedule_record
from tests.conftest import run_cli
from tests.models import tiny_model


def _profile(tmp_path: Path, **variant: object) -> Path:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["name"] = "tiny-routes"
    raw["model"] |= {"file": "tiny.gguf", "bytes": None, "sha256": None, "synth": None}
    raw["limits"]["engine_min_memory"] = "8MiB"
    raw["variants"][1] |= variant
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_engine_gets_the_routes_file_from_the_models_mount(tmp_path: Path) -> None:
    profile = load_profile(str(_profile(tmp_path, routes="qwen3.routes")))
    baseline, forced = profile.variants[0], profile.variants[1]
    assert (baseline.routes, forced.routes) == (None, "qwen3.routes")
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=None, cgroup_version=2, gpu_device_ids=None
    )
    engine = LlamaMoeTraceEngine("img:tag")
    trials = trial_plan(profile, 1)
    by_variant = {
        t.variant.name: container_spec(profile, engine, t, settings, tmp_path / "s", "n", {}) for t in trials
    }
    command = by_variant[forced.name]["command"]
    assert command[command.index("--routes-from") + 1] == "/models/qwen3.routes"
    assert "--routes-from" not in by_variant[baseline.name]["command"]
    assert len(by_variant[forced.name]["volumes"]) == 2  # the models mount already holds it
    record = schedule_record(profile, trials)
    assert [v.get("routes") for v in record["variants"]] == [None, "qwen3.routes", None]


@pytest.mark.parametrize(
    ("variant", "trace", "message"),
    [
        ({"routes": "r.routes"}, False, "/variants/1/routes: needs trace: true"),
        ({"routes": "../r.routes"}, True, "/variants/1/routes: '../r.routes' is not a plain file name"),
        ({"routes": "sub/r.routes"}, True, "/variants/1/routes: 'sub/r.routes' is not a plain file name"),
    ],
)
def test_bad_routes_fields_are_refused(
    tmp_path: Path, variant: dict[str, str], trace: bool, message: str
) -> None:
    path = _profile(tmp_path, **variant)
    raw = yaml.safe_load(path.read_text())
    raw["trace"] = trace
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_profile(str(path))


def test_the_trial_records_the_routes_files_sha256(tmp_path: Path) -> None:
    (tmp_path / "a.routes").write_bytes(b"MOEROUTE-bytes")
    assert routes_record("a.routes", tmp_path, "forced") == {
        "file": "a.routes",
        "sha256": sha256_bytes(b"MOEROUTE-bytes"),
    }


def test_a_missing_routes_file_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").symlink_to(tiny_model("qwen3moe", size="32MiB"))
    path = _profile(tmp_path, routes="real.routes")
    variant = load_profile(str(path)).variants[1].name
    argv = ("run", str(path), "--models", str(models), "--out", str(tmp_path / "run"), "--dry-run")
    refused = run_cli(*argv)
    assert refused.returncode == 1
    assert refused.stderr == (
        f"error: routes file real.routes of variant {variant} not found in {models}; make it "
        f"from a route trace with: appliance trace routes TRACE --out {models / 'real.routes'}\n"
    )
    assert not (tmp_path / "run").exists()
    (models / "real.routes").write_bytes(b"x")
    planned = run_cli(*argv, check=True)
    assert "--routes-from /models/real.routes" in planned.stdout
