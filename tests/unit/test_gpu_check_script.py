"""scripts/gpu-check.sh: its help and its refusals (the stand-in run is tests/e2e/test_gpu_check.py)."""

import subprocess
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu-check.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_option() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for option in (
        "--tree",
        "--model",
        "--out",
        "--jobs",
        "--arch",
        "--cpu-only",
        "--stand-in",
        "--n-cpu-moe",
        "--prepare",
    ):
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


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "tree" / "tools" / "moe-trace").mkdir(parents=True)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return tmp_path / "tree", model


def test_cpu_only_and_stand_in_together_are_refused_before_building(tmp_path: Path) -> None:
    tree, model = _tree(tmp_path)
    out = tmp_path / "out"
    result = _run("--tree", str(tree), "--model", str(model), "--out", str(out), "--cpu-only", "--stand-in")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "gpu-check: --cpu-only and --stand-in exclude each other: pass one"
    ]
    assert not out.exists()


def test_a_layer_count_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    tree, model = _tree(tmp_path)
    args = ("--tree", str(tree), "--model", str(model), "--out", str(tmp_path / "out"), "--stand-in")
    result = _run(*args, "--n-cpu-moe", "two")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["gpu-check: --n-cpu-moe takes a number of layers, not two"]
