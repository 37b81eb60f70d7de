"""One unit table: evidence, profiles and the planner read a size exactly as core.units does."""

import json
from pathlib import Path

import pytest
import yaml

from appliance.core.errors import ApplianceError
from appliance.core.units import SizeError, format_size, parse_size, size_or_none
from appliance.evidence.bundle_facts import BundleFacts
from appliance.runs.profile import PROFILES_DIR, parse_profile
from tests.conftest import run_cli
from tests.models import tiny_model

SIZES = ["8M", "8MiB", "8GB", "8mb", "8 MiB", "1.5GiB", "7000001"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8M", 8_000_000),
        ("8MB", 8_000_000),
        ("8MiB", 8 << 20),
        ("8GB", 8_000_000_000),
        ("8GiB", 8 << 30),
        ("1.5GiB", 3 << 29),
        ("24k", 24_000),
        ("0", 0),
        ("512 B", 512),
        (4096, 4096),
        ("9223372036854775807", (1 << 63) - 1),  # exact: through a float it became 2**63
        ("0.1KiB", 102),
    ],
)
def test_decimal_prefixes_are_powers_of_1000_binary_ones_of_1024(text: str | int, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["lots", "8Q", "-1", "", True, None, 2.5, -1])
def test_what_is_not_a_size_is_refused_with_how_to_write_one(bad: object) -> None:
    with pytest.raises(SizeError, match="e.g. 400MiB, 8GiB, 24GB"):
        parse_size(bad)  # type: ignore[arg-type]
    assert size_or_none(bad) is None
    assert issubclass(SizeError, ApplianceError)


def test_one_formatter_in_two_widths() -> None:
    assert format_size(8 << 30) == "8.00 GiB"
    assert format_size(8 << 30, trim=True) == "8 GiB"
    assert format_size(17_821_719_168, trim=True) == "16.6 GiB"
    assert format_size(512) == format_size(512, trim=True) == "512 B"
    assert format_size(-(3 << 20)) == "-3.00 MiB"


def _profile_memory(tmp_path: Path, size: str) -> int:
    raw = yaml.safe_load((PROFILES_DIR / "tiny-oversub.yaml").read_text())
    raw["limits"] = {"memory": size, "swap": 0, "engine_min_memory": "1MiB"}
    path = tmp_path / "p.yaml"
    return parse_profile(raw, path, yaml.safe_dump(raw)).limits.memory


def _evidence_memory(tmp_path: Path, size: str) -> int | None:
    run = tmp_path / "run"
    (run / "inputs").mkdir(parents=True, exist_ok=True)
    (run / "inputs" / "profile.yaml").write_text(yaml.safe_dump({"limits": {"memory": size}}))
    return BundleFacts.read(run).memory_limit_bytes


def _planner_ram(size: str) -> int:
    result = run_cli("plan", str(tiny_model("qwen3moe")), "--json", "--ram", size, "--vram", size)
    limits = json.loads(result.stdout)["plan"]["limits"]
    assert limits["vram_bytes"] == limits["ram_bytes"]
    return int(limits["ram_bytes"])


@pytest.mark.parametrize("size", SIZES)
def test_evidence_profile_and_plan_read_sizes_as_core_units(tmp_path: Path, size: str) -> None:
    expected = parse_size(size)
    assert _profile_memory(tmp_path, size) == expected
    assert _evidence_memory(tmp_path, size) == expected


@pytest.mark.parametrize("size", ["8M", "8MiB", "8GB"])
def test_the_planner_reads_sizes_as_core_units(size: str) -> None:
    assert _planner_ram(size) == parse_size(size)
