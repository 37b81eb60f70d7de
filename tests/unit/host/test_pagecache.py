import os
import shutil
import subprocess
from pathlib import Path

from appliance.host.pagecache import evict, evict_and_measure, residency

SIZE = 8 << 20


def _fincore_pages(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "PAGES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0])


def _written(tmp_path: Path) -> Path:
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(SIZE))
    return path


def test_eviction_empties_the_page_cache_for_the_file(tmp_path: Path) -> None:
    path = _written(tmp_path)
    path.read_bytes()
    hot = residency(path)
    assert hot.total_pages == SIZE // hot.page_size
    assert hot.resident_pages == hot.total_pages
    cold = evict_and_measure(path)
    assert cold.resident_pages == 0 and cold.resident_bytes == 0


def test_measuring_residency_reads_nothing(tmp_path: Path) -> None:
    path = _written(tmp_path)
    evict(path)
    evict(path)
    assert residency(path).resident_pages == 0
    assert residency(path).resident_pages == 0  # mincore on a fresh mapping faults nothing in


def test_partial_reads_are_counted_like_fincore(tmp_path: Path) -> None:
    path = _written(tmp_path)
    evict_and_measure(path)
    with open(path, "rb") as handle:
        handle.seek(SIZE // 2)
        handle.read(1 << 20)
    measured = residency(path)
    assert 0 < measured.resident_pages < measured.total_pages
    if shutil.which("fincore"):
        assert measured.resident_pages == _fincore_pages(path)


def test_an_empty_file_has_no_pages(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert residency(path).total_pages == 0
