"""scripts/gpu-check.sh: its help and its refusals (the CPU-only run is tests/e2e/test_gpu_check.py)."""

import subprocess
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu-check.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_option() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for option in ("--tree", "--model", "--out", "--jobs", "--arch", "--cpu-only", "--prepare"):
        assert option in result.stdout


def test_an_unknown_argument_is_one_line_and_exit_2() -> None:
    result = _run("--bogus")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["gpu-check: unknown argument --bogus (see --help)"]


def test_a_tree_without_the_tracer_is_refused_before_building(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = _run(
        "--tree", str(tmp_path), "--model", str(model), "--out", str(tmp_path / "out"), "--cpu-only"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"gpu-check: {tmp_path} is not a patched llama.cpp tree (no tools/moe-trace): use --prepare"
    ]
    assert not (tmp_path / "out").exists()
