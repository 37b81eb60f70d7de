"""bench.calibrate_walk: what it refuses before it starts an engine."""

from pathlib import Path

import pytest

from appliance.host import meminfo
from bench import calibrate_walk


def test_it_refuses_to_start_an_engine_without_memory_for_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "walk.gguf"
    model.write_bytes(bytes(3 << 20))
    fake = tmp_path / "meminfo"
    monkeypatch.setattr(meminfo, "MEMINFO", fake)
    fake.write_text(f"MemAvailable: {2 << 10} kB\n")
    with pytest.raises(SystemExit, match=r"walk\.gguf is .* GiB and only .*one engine at a time"):
        calibrate_walk.check_room_for(model)
    fake.write_text(f"MemAvailable: {4 << 10} kB\n")
    calibrate_walk.check_room_for(model)
