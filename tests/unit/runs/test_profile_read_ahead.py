"""limits.read_ahead and limits.read_ahead_mode: what a profile may write, each bad value refused
in one line naming the field, and which built-in profiles set the read-ahead."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.core.errors import ConfigError
from appliance.host.read_ahead import ReadAheadMode
from appliance.runs.profile import MAX_READ_AHEAD, PROFILES_DIR, MemoryLimits, builtin_profiles, load_profile


def limits_of(tmp_path: Path, **limits: Any) -> MemoryLimits:
    """tiny-oversub's limits with these keys added, loaded from a file in tmp_path."""
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["limits"].update(limits)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_profile(str(path)).limits


@pytest.mark.parametrize(
    ("limits", "kb", "mode"),
    [
        ({}, None, ReadAheadMode.OBSERVE),
        ({"read_ahead_mode": "observe"}, None, ReadAheadMode.OBSERVE),
        ({"read_ahead": "128KiB"}, 128, ReadAheadMode.SET),
        ({"read_ahead": "128KiB", "read_ahead_mode": "set"}, 128, ReadAheadMode.SET),
        ({"read_ahead": "128KiB", "read_ahead_mode": "observe"}, 128, ReadAheadMode.OBSERVE),
        ({"read_ahead": 131072}, 128, ReadAheadMode.SET),  # bytes
        ({"read_ahead": "4KiB"}, 4, ReadAheadMode.SET),
        ({"read_ahead": "16MiB"}, 16384, ReadAheadMode.SET),
    ],
)
def test_a_read_ahead_is_a_size_set_unless_the_mode_says_observe(
    tmp_path: Path, limits: dict[str, Any], kb: int | None, mode: ReadAheadMode
) -> None:
    got = limits_of(tmp_path, **limits)
    assert (got.read_ahead_kb, got.read_ahead_mode) == (kb, mode)


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"read_ahead": "fast"}, "/limits/read_ahead: cannot read size 'fast': write a number"),
        ({"read_ahead": "2KiB"}, "/limits/read_ahead: '2KiB' is below 4 KiB, one page"),
        ({"read_ahead": 0}, "/limits/read_ahead: 0 is below 4 KiB, one page"),
        ({"read_ahead": "16388KiB"}, "/limits/read_ahead: '16388KiB' is above 16 MiB"),
        (
            {"read_ahead": "130KiB"},
            "/limits/read_ahead: '130KiB' is 133120 bytes, not a whole number of 4 KiB pages: the "
            "kernel would round it down to 128 KiB; write KiB, e.g. 128KiB",
        ),
        (
            {"read_ahead": "128K"},  # decimal: 128,000 bytes
            "/limits/read_ahead: '128K' is 128000 bytes, not a whole number of 4 KiB pages: the "
            "kernel would round it down to 124 KiB; write KiB, e.g. 128KiB",
        ),
        (
            {"read_ahead_mode": "set"},
            "/limits/read_ahead_mode: set needs limits.read_ahead, the value to set",
        ),
        ({"read_ahead": "128KiB", "read_ahead_mode": "always"}, "/limits/read_ahead_mode"),
    ],
)
def test_a_bad_read_ahead_is_refused_in_one_line_naming_the_field(
    tmp_path: Path, limits: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match="/limits/read_ahead") as info:
        limits_of(tmp_path, **limits)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'p.yaml'}: {problem}") and "\n" not in message


def test_the_full_shape_profiles_set_128_kib_and_the_others_only_observe() -> None:
    """The full shapes' baselines compare across machines at the usual NVMe read-ahead; the
    slices (the e2e suite's, run by any user), the verdict sweep and the tiny demos keep the
    device's own, as their published findings were measured."""
    setting = {
        name: load_profile(name).limits.read_ahead_kb
        for name in builtin_profiles()
        if load_profile(name).limits.read_ahead_mode == ReadAheadMode.SET
    }
    assert setting == {
        "qwen35-shape-8g": 128,
        "qwen35-shape-8g-prefill": 128,
        "qwen3-30b-shape": 128,
        "qwen3-30b-shape-prefill": 128,
    }


def test_read_ahead_at_the_limit_and_one_page_past(tmp_path: Path) -> None:
    assert limits_of(tmp_path, read_ahead=MAX_READ_AHEAD).read_ahead_kb == MAX_READ_AHEAD // 1024
    with pytest.raises(ConfigError, match=r"/limits/read_ahead: \d+ is above 16 MiB"):
        limits_of(tmp_path, read_ahead=MAX_READ_AHEAD + 4096)
