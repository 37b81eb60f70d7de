import os
from pathlib import Path

import pytest

from appliance.host import meminfo
from appliance.host.meminfo import meminfo_bytes


def test_mem_total_is_the_kernels_physical_memory() -> None:
    assert meminfo_bytes("MemTotal") == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_lines_are_read_in_bytes_and_a_missing_line_or_file_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       24000000 kB\nMemAvailable:    1234 kB\nSwapTotal:             0 kB\n")
    monkeypatch.setattr(meminfo, "MEMINFO", fake)
    assert meminfo_bytes("MemAvailable") == 1234 * 1024
    assert meminfo_bytes("SwapTotal") == 0
    assert meminfo_bytes("Mem") is None
    assert meminfo_bytes("HugePages_Total") is None
    fake.unlink()
    assert meminfo_bytes("MemTotal") is None
