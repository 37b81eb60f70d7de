"""The trial record names the backend the engine ran on, from the engine's own timing record."""

import json
from pathlib import Path

from appliance.runs.trial import engine_backend


def test_the_trial_record_takes_the_backend_from_the_engine_timing_record(tmp_path: Path) -> None:
    timing = tmp_path / "timing.json"
    assert engine_backend(timing) is None  # the engine wrote none
    timing.write_text(json.dumps({"tool": "llama-moe-trace", "backend": "CPU", "devices": "CPU"}))
    assert engine_backend(timing) == "CPU"
    timing.write_text("[1, 2]")
    assert engine_backend(timing) is None
