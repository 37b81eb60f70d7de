"""Sweep limits (`appliance.runs.memory_points`): fractions and sizes of the model file
resolved once to whole pages, and every unreadable or unusable point refused in one line."""

import re

import pytest

from appliance.core.errors import ConfigError
from appliance.runs.memory_points import (
    SweepLimit,
    limit_label,
    parse_memory_list,
    parse_memory_point,
    resolve_limits,
)

MODEL = 417_356_704


def test_fractions_become_whole_pages_of_the_model_file() -> None:
    points = parse_memory_list("0.25, 0.5,1.2")
    resolved = resolve_limits(points, MODEL, 64 << 20, "tiny")
    assert [limit.point for limit in resolved] == ["0.25", "0.5", "1.2"]
    limits = [limit.bytes for limit in resolved]
    assert limits == [104_337_408, 208_674_816, 500_826_112]
    assert all(limit % 4096 == 0 for limit in limits)
    assert limits[0] <= 0.25 * MODEL < limits[0] + 4096


def test_sizes_keep_their_bytes_and_come_back_ascending() -> None:
    resolved = resolve_limits(parse_memory_list("600MiB,150MiB,0.5"), MODEL, 64 << 20, "tiny")
    assert resolved == [
        SweepLimit(150 << 20, "150MiB"),
        SweepLimit(208_674_816, "0.5"),
        SweepLimit(600 << 20, "600MiB"),
    ]
    limits = [limit.bytes for limit in resolved]
    assert [limit_label(m) for m in limits] == ["150MiB", "199MiB", "600MiB"]
    assert limit_label(6 << 30) == "6GiB"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.000000001", "rounds to zero bytes"),
        ("32MiB", "below profile tiny's engine minimum of 67108864 bytes"),
        ("0.5,0.5", "are the same limit"),
        ("200MiB,209715200B", "are the same limit"),
    ],
)
def test_bad_limits_are_refused_before_anything_starts(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        resolve_limits(parse_memory_list(text), MODEL, 64 << 20, "tiny")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "must be above 0"),
        ("-0.5", "must be above 0"),
        ("8589934592", "write sizes with a unit"),
        ("lots", "expected a fraction of the model"),
        ("0.3,,0.5", "comma-separated list"),
        ("", "comma-separated list"),
    ],
)
def test_unreadable_points_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_memory_list(text)
    assert message in str(info.value)


def test_a_point_is_a_fraction_or_a_size() -> None:
    assert parse_memory_point(0.3).fraction == 0.3
    assert parse_memory_point("6GiB").size == 6 << 30
    with pytest.raises(ConfigError, match=r"^memory True: expected a fraction of the model \(0.5\)"):
        parse_memory_point(True)
