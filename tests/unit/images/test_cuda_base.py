"""Registry-free CUDA bases: wheels verified against the lock before Docker, contexts assembled.

The wheels here are small real zip files laid out like NVIDIA's (`nvidia/cu13/...`), written
into a folder passed as `--wheels`, and a copy of the lock pins their sha256: the real wheels
are 600 MB and live on PyPI, which tests do not reach. Docker is pointed at a socket that does
not exist, so a refusal that names the wheel proves it came before any Docker call.
"""

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from appliance.core.digests import sha256_file
from appliance.core.errors import ConfigError, IntegrityError
from appliance.engine.lock import load_lock
from appliance.images.cuda_base import (
    RUNTIME_LIBRARIES,
    assemble_context,
    cuda_base_tag,
    fetch_wheels,
    parse_cuda_base_tag,
)
from tests.conftest import lock_with, run_cli

CUDA = "13.0.2"
NO_DOCKER = "unix:///nonexistent/docker.sock"

# what each synthesized wheel holds below nvidia/cu13/ (enough to tell the parts apart)
CONTENTS = {
    "nvidia-cuda-nvcc": ["bin/nvcc", "bin/ptxas", "bin/nvcc.profile"],
    "nvidia-nvvm": ["nvvm/bin/cicc", "lib/libnvvm.so.4", "include/nvvm.h"],
    "nvidia-cuda-crt": ["include/crt/host_config.h"],
    "nvidia-cuda-cccl": ["include/cccl/cuda/std/version"],
    "nvidia-cuda-runtime": ["lib/libcudart.so.13", "lib/libcudart_static.a", "include/cuda_runtime.h"],
    "nvidia-cublas": [
        "lib/libcublas.so.13",
        "lib/libcublasLt.so.13",
        "lib/libnvblas.so.13",
        "include/cublas_v2.h",
    ],
}


def _write_wheel(path: Path, package: str) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for rel in CONTENTS[package]:
            info = zipfile.ZipInfo(f"nvidia/cu13/{rel}")
            info.external_attr = (0o755 if "/bin/" in f"/{rel}" else 0o644) << 16
            archive.writestr(info, f"{package}:{rel}\n")
        archive.writestr(f"{package.replace('-', '_')}.dist-info/METADATA", f"Name: {package}\n")


@pytest.fixture
def wheels(tmp_path: Path) -> tuple[Path, Path]:
    """(folder of synthesized wheels, a lock copy pinning their sha256)."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    toolkit = load_lock().cuda_toolkit(CUDA)
    for wheel in toolkit.wheels:
        _write_wheel(folder / wheel.file, wheel.package)

    def pin(raw: dict[str, Any]) -> None:
        for entry in raw["cuda_toolkits"][CUDA]["wheels"]:
            entry["sha256"] = sha256_file(folder / entry["file"])

    return folder, lock_with(tmp_path, pin)


def _env(tmp_path: Path) -> dict[str, str]:
    return {"APPLIANCE_CACHE": str(tmp_path / "cache"), "DOCKER_HOST": NO_DOCKER}


def _changed(lock_path: Path, index: int, sha256: str) -> Path:
    raw = json.loads(lock_path.read_text())
    raw["cuda_toolkits"][CUDA]["wheels"][index]["sha256"] = sha256
    changed = lock_path.with_name("changed.json")
    changed.write_text(json.dumps(raw))
    return changed


def test_a_changed_wheel_sha256_refuses_the_base_build_in_one_line_before_docker(
    tmp_path: Path, wheels: tuple[Path, Path]
) -> None:
    folder, lock_path = wheels
    last = load_lock(lock_path).cuda_toolkit(CUDA).wheels[-1]
    changed = _changed(lock_path, -1, "0" * 64)
    result = run_cli(
        "image",
        "base",
        "--cuda",
        CUDA,
        "--cuda-only",
        "--wheels",
        str(folder),
        "--lock",
        str(changed),
        env=_env(tmp_path),
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    actual = sha256_file(folder / last.file)
    assert f"wheel {last.file} has sha256 {actual}, the lock pins {'0' * 64}: refused" in lines[0]
    cached = tmp_path / "cache" / "wheels"
    # the refused wheel is not kept; the ones verified before it are
    assert not (cached / last.file).exists()
    assert sorted(p.name for p in cached.glob("*.whl")) == sorted(
        w.file for w in load_lock(lock_path).cuda_toolkit(CUDA).wheels[:-1]
    )


def test_the_same_wheels_pass_verification_when_the_lock_pins_them(
    tmp_path: Path, wheels: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, lock_path = wheels
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    toolkit = load_lock(lock_path).cuda_toolkit(CUDA)
    verified = fetch_wheels(toolkit, folder, log=lambda _: None)
    assert {name: sha256_file(path) for name, path in verified.items()} == {
        w.file: w.sha256 for w in toolkit.wheels
    }
    # a cached wheel is hashed again on every use: a file changed in the cache is refused
    first = toolkit.wheels[0]
    verified[first.file].write_bytes(b"tampered")
    with pytest.raises(IntegrityError, match=f"^wheel {first.file} has sha256 "):
        fetch_wheels(toolkit, folder, log=lambda _: None)


def test_a_missing_wheel_is_refused_in_one_line(tmp_path: Path, wheels: tuple[Path, Path]) -> None:
    folder, lock_path = wheels
    gone = load_lock(lock_path).cuda_toolkit(CUDA).wheels[2]
    (folder / gone.file).unlink()
    result = run_cli(
        "image",
        "base",
        "--cuda",
        CUDA,
        "--cuda-only",
        "--wheels",
        str(folder),
        "--lock",
        str(lock_path),
        env=_env(tmp_path),
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"wheel {gone.file} ({gone.requirement}) is missing from {folder}" in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["image", "base", "--cuda", "12.9.9", "--cuda-only"], "CUDA 12.9.9 is not in the lock"),
        (["image", "base", "--cuda", "12.8.1", "--cuda-only"], "CUDA 12.8.1 comes from nvidia/cuda images"),
        (["image", "build", "--target", "sm99", "--source", "b10229"], "unknown target 'sm99'"),
        (["image", "build", "--target", "sm89", "--cuda", "11.8.0"], "CUDA 11.8.0 is not in the lock"),
        (["image", "build", "--target", "cpu", "--cuda", "13.0.2"], "target cpu is not a CUDA target"),
    ],
)
def test_bad_cuda_input_is_one_line_without_docker(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(*args, env=_env(tmp_path))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "cache" / "wheels").exists()


def test_build_context_holds_the_toolkit_and_runtime_context_only_cudart_and_cublas(
    tmp_path: Path, wheels: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, lock_path = wheels
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    toolkit = load_lock(lock_path).cuda_toolkit(CUDA)
    verified = fetch_wheels(toolkit, folder, log=lambda _: None)
    assemble_context(toolkit, "build", verified, tmp_path / "build")
    cuda = tmp_path / "build" / "cuda"
    assert (cuda / "bin" / "nvcc").stat().st_mode & 0o111
    assert (cuda / "nvvm" / "bin" / "cicc").is_file() and (cuda / "include" / "cccl").is_dir()
    assert (cuda / "lib64").is_symlink() and (cuda / "lib64").readlink() == Path("lib")
    assert (cuda / "lib" / "libcublas.so").readlink() == Path("libcublas.so.13")
    assemble_context(toolkit, "runtime", verified, tmp_path / "runtime")
    runtime = sorted(p.name for p in (tmp_path / "runtime" / "cuda" / "lib").iterdir())
    assert runtime == [
        "libcublas.so",
        "libcublas.so.13",
        "libcublasLt.so",
        "libcublasLt.so.13",
        "libcudart.so",
        "libcudart.so.13",
    ]
    assert all(name.startswith(RUNTIME_LIBRARIES) or name.endswith(".so") for name in runtime)
    assert sorted(p.name for p in (tmp_path / "runtime" / "cuda").iterdir()) == ["lib"]


def test_cuda_base_tags_round_trip_and_name_the_debian_epoch() -> None:
    tag = cuda_base_tag("runtime", CUDA, 1772323200)
    assert tag == "moe-appliance/cuda-runtime:13.0.2-bookworm-1772323200"
    assert parse_cuda_base_tag(tag) == ("runtime", CUDA, 1772323200)
    assert parse_cuda_base_tag("moe-appliance/debian-runtime:bookworm-1772323200") is None
    toolkit = load_lock().cuda_toolkit(CUDA)
    assert (toolkit.build_base, toolkit.runtime_base) == (
        cuda_base_tag("build", CUDA),
        cuda_base_tag("runtime", CUDA),
    )


def test_a_gpu_target_naming_a_cuda_version_the_lock_lacks_is_refused(tmp_path: Path) -> None:
    path = lock_with(tmp_path, lambda r: r["targets"]["sm89"]["cuda"].update(version="12.4.0"))
    with pytest.raises(ConfigError, match=r"/targets/sm89/cuda/version: CUDA 12.4.0 is not in cuda_toolkits"):
        load_lock(path)


def test_a_pypi_toolkit_without_wheels_is_refused(tmp_path: Path) -> None:
    path = lock_with(tmp_path, lambda r: r["cuda_toolkits"][CUDA].pop("wheels"))
    with pytest.raises(ConfigError, match=r"/cuda_toolkits/13.0.2: kind pypi-wheels needs wheels"):
        load_lock(path)
