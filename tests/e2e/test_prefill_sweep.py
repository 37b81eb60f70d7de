"""The prefill readers through the appliance's own sweep: profile tiny-oversub-prefill (what `make
demo-prefill` runs, one repeat), its 534-token prompt at a quarter and 1.2 times the demo model,
on the cpu image.

Under the limit the readers' prompt reads less than demand prefetch's (each chosen expert whole,
once while held), at depth; above the model's size both read exactly what they use and the
readers release nothing when the prompt ends (the model fits); every text is byte-identical and
every trial gets its prompt row beside its bound.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.runs.profile import load_profile
from tests.conftest import run_cli
from tests.e2e.conftest import private_demo_model, user_env

PROFILE = "tiny-oversub-prefill"


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_the_prefill_demo_reads_each_chosen_expert_whole_and_releases_nothing_where_the_model_fits(
    engine_image_cpu: str, tmp_path: Path
) -> None:
    run, models = tmp_path / "run", private_demo_model(PROFILE, tmp_path)
    result = run_cli(
        "sweep", PROFILE, "--models", str(models), "--out", str(run), "--repeats", "1",
        "--image", engine_image_cpu, env=user_env(tmp_path), timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "sweep prompt" in result.stdout  # the prompt's table
    results = json.loads((run / "results.json").read_text())
    assert results["byte_identity"]["all_identical"] is True
    rows: dict[tuple[str, int], dict[str, Any]] = {
        (r["variant"], r["memory_limit"]): r for r in results["sweep"]["trials"]
    }
    low, high = sorted({limit for _, limit in rows})
    model_bytes = load_profile(PROFILE).model.bytes
    assert model_bytes is not None and low < model_bytes < high
    assert len(rows) == 8 and all(r["prefill"]["tokens"] == 534 for r in rows.values())

    readers, prefetch = rows["demand-prefill", low]["prefill"], rows["demand-prefetch", low]["prefill"]
    assert readers["bound_bytes"] == prefetch["bound_bytes"] > 0
    assert readers["read_bytes"] < prefetch["read_bytes"]
    assert readers["read_depth"] == 8 and readers["readers"]["layers_mapped"] == 4
    assert readers["readers"]["budget_source"] == "derived" and readers["readers"]["dropped_bytes"] > 0

    fits = rows["demand-prefill", high]["prefill"]
    for variant in ("demand-prefetch", "demand-prefill"):  # each page the prompt uses, read once
        assert 0.99 <= rows[variant, high]["prefill"]["read_over_bound"] <= 1.02, rows[variant, high]
    record = fits["readers"]
    assert record["dropped_bytes"] == record["released_bytes"] == 0
    assert record["held_bytes"] == record["queued_bytes"] - record["cancelled_bytes"] > 0
