"""The cpu engine image: built from the b10229 stand-in on the registry-free base, labelled,
reused when unchanged, small, non-root, compiler-free, self-tested, and checked against the lock."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from appliance.engine.lock import load_lock
from appliance.engine.patches import series_digest
from appliance.engine.tools import IMAGE_TOOLS
from appliance.images import labels as L
from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]

SIZE_LIMIT = 83 * 1000 * 1000  # issue 20: no larger than llama.cpp's own light CPU image


def test_second_build_is_a_cache_hit(engine_image_cpu: str) -> None:
    result = run_cli("image", "build", "--target", "cpu", "--source", "b10229", "--json", check=True)
    report = json.loads(result.stdout)
    assert report["reused"] is True
    assert report["builder"] == "none"
    assert report["tag"] == engine_image_cpu


def test_tag_and_labels_record_every_input(engine_image_cpu: str, docker_client) -> None:  # type: ignore[no-untyped-def]
    lock = load_lock()
    lock_digest = lock.digest
    assert engine_image_cpu == f"moe-expert-cache:cpu-{lock_digest[:12]}-standin-b10229"
    labels = docker_client.images.get(engine_image_cpu).labels
    assert labels["org.opencontainers.image.source"] == lock.upstream.repository
    assert labels["org.opencontainers.image.revision"] == "b10229"
    assert labels["org.opencontainers.image.version"] == "b10229"
    assert labels["org.opencontainers.image.created"].endswith("Z")
    assert labels[L.LOCK_DIGEST] == lock_digest
    assert labels[L.UPSTREAM_COMMIT] == lock.upstream.commit
    assert labels[L.SERIES_DIGEST] == series_digest(lock)
    assert (labels[L.SOURCE_KIND], labels[L.SOURCE_NAME]) == ("stand-in", "b10229")
    identity = json.loads(labels[L.SOURCE_IDENTITY])
    assert identity["sdist_sha256"] == lock.stand_ins["b10229"].sdist_sha256
    assert identity["canonical"] is False
    assert (labels[L.TARGET], labels[L.CUDA_ARCHITECTURES]) == ("cpu", "")
    cpu = lock.target("cpu")
    runtime_id = docker_client.images.get(cpu.runtime_base).id
    assert labels[L.RUNTIME_BASE] == f"{cpu.runtime_base}@{runtime_id}"
    assert len(labels[L.INPUTS_DIGEST]) == 64


def test_runtime_image_is_small_non_root_and_has_no_compiler(engine_image_cpu: str, docker_client) -> None:  # type: ignore[no-untyped-def]
    image = docker_client.images.get(engine_image_cpu)
    print(f"cpu engine image size: {image.attrs['Size'] / 1e6:.1f} MB")
    assert image.attrs["Size"] < SIZE_LIMIT
    assert image.attrs["Config"]["User"] not in ("", "0", "root", "0:0")
    script = (
        "ls /usr/local/bin; echo uid=$(id -u); "
        "for c in cc gcc g++ c++ clang cmake ld as; do command -v $c; done; true"
    )
    out = (
        docker_client.containers.run(engine_image_cpu, ["sh", "-c", script], remove=True, network_mode="none")
        .decode()
        .split()
    )
    uid = next(word for word in out if word.startswith("uid="))
    assert uid != "uid=0"
    binaries = [word for word in out if not word.startswith(("uid=", "/"))]
    assert sorted(binaries) == sorted(IMAGE_TOOLS)
    assert [word for word in out if word.startswith("/")] == [], "a compiler or linker is present"


def test_the_compiler_cache_stays_out_of_the_image(engine_image_cpu: str, docker_client) -> None:  # type: ignore[no-untyped-def]
    image = docker_client.images.get(engine_image_cpu)
    history = " ".join(str(layer.get("CreatedBy", "")) for layer in image.history())
    assert "ccache" not in history and "--mount" not in history
    assert not any("CCACHE" in env for env in image.attrs["Config"].get("Env") or [])
    out = docker_client.containers.run(
        engine_image_cpu,
        ["sh", "-c", "ls -d /ccache /root/.ccache /root/.cache/ccache; command -v ccache; true"],
        remove=True,
        network_mode="none",
        stderr=True,
    ).decode()
    assert "No such file" in out and "/usr/bin/ccache" not in out


def test_selftest_passes_for_every_tool(engine_image_cpu: str) -> None:
    result = run_cli("image", "selftest", engine_image_cpu, "--json")
    checks = json.loads(result.stdout)
    assert result.returncode == 0, result.stderr
    names = [c["name"] for c in checks]
    for tool in IMAGE_TOOLS:
        assert f"{tool} --help" in names and f"{tool} libraries" in names
    assert "non-root user" in names and "no compiler" in names
    assert all(c["ok"] for c in checks), checks


def test_inspect_matches_the_lock(engine_image_cpu: str) -> None:
    result = run_cli("image", "inspect", engine_image_cpu, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, result.stderr
    assert report["matches"] is True and report["drift"] == []


def test_inspect_refuses_an_image_that_is_not_an_engine(docker_client) -> None:  # type: ignore[no-untyped-def]
    base = load_lock().target("cpu").runtime_base
    if not docker_client.images.list(name=base.split(":")[0]):
        pytest.fail(f"{base} should exist once the engine image is built")
    result = run_cli("image", "inspect", base)
    assert result.returncode == 3
    assert "not an engine image of this lock" in result.stderr


def _copy_lock_and_patches(root: Path) -> Path:
    (root / "engine").mkdir(parents=True)
    lock_path = root / "engine" / "llama.cpp.lock.json"
    shutil.copy(REPO / "engine" / "llama.cpp.lock.json", lock_path)
    shutil.copytree(REPO / "patches", root / "patches")
    return lock_path


def test_one_byte_in_an_active_patch_changes_the_series_and_drifts_the_image(
    engine_image_cpu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_path = _copy_lock_and_patches(tmp_path)
    env = {"APPLIANCE_ROOT": str(tmp_path)}
    control = run_cli("image", "inspect", engine_image_cpu, "--lock", str(lock_path), env=env)
    assert control.returncode == 0, control.stderr

    raw = json.loads(lock_path.read_text())
    entry = raw["patches"]["active"][-1]
    patch = tmp_path / "patches" / "llama.cpp" / "active" / entry["file"]
    data = bytearray(patch.read_bytes())
    at = data.index(b"Subject: ") + len(b"Subject: ") + 2
    data[at] ^= 0x20  # flip the case of one letter in the subject line
    patch.write_bytes(bytes(data))
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    lock_path.write_text(json.dumps(raw, indent=2) + "\n")

    monkeypatch.setenv("APPLIANCE_ROOT", str(tmp_path))
    changed = series_digest(load_lock(lock_path))
    monkeypatch.delenv("APPLIANCE_ROOT")
    original = series_digest(load_lock())
    assert changed != original

    result = run_cli("image", "inspect", engine_image_cpu, "--lock", str(lock_path), "--json", env=env)
    assert result.returncode == 3
    drift = {d["label"]: d for d in json.loads(result.stdout)["drift"]}
    assert drift[L.SERIES_DIGEST]["in_image"] == original
    assert drift[L.SERIES_DIGEST]["expected"] == changed
    assert "built with another patch series" in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_unknown_target_is_a_one_line_error() -> None:
    result = run_cli("image", "build", "--target", "sm75", "--source", "b10229")
    assert result.returncode == 2
    assert result.stderr == "error: unknown target 'sm75': the lock names cpu, sm120, sm89\n"


def test_a_lock_target_missing_a_field_is_a_one_line_error(tmp_path: Path) -> None:
    raw = json.loads((REPO / "engine" / "llama.cpp.lock.json").read_text())
    del raw["targets"]["cpu"]["runtime_base"]
    lock_path = tmp_path / "lock.json"
    lock_path.write_text(json.dumps(raw))
    result = run_cli("image", "build", "--target", "cpu", "--lock", str(lock_path))
    assert result.returncode == 2
    assert "/targets/cpu/runtime_base: missing field" in result.stderr


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_a_failed_build_shows_the_log_tail_and_leaves_no_tag(
    engine_image_cpu: str, builder: str, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads((REPO / "engine" / "llama.cpp.lock.json").read_text())
    raw["targets"]["cpu"]["cmake_args"].append("-DGGML_CUDA=ON")  # no CUDA toolkit in the base
    lock_path = tmp_path / "lock.json"
    lock_path.write_text(json.dumps(raw))
    tag = f"moe-expert-cache:cpu-{load_lock(lock_path).digest[:12]}-standin-b10229"
    result = run_cli(
        "image",
        "build",
        "--target",
        "cpu",
        "--source",
        "b10229",
        "--builder",
        builder,
        "--lock",
        str(lock_path),
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: image build for cpu failed; last lines:")
    log_line = result.stderr.strip().splitlines()[-1]
    assert log_line.startswith("full log: ")
    log = Path(log_line.removeprefix("full log: "))
    assert "CUDA Toolkit not found" in log.read_text()
    assert not docker_client.images.list(name=tag)


def test_a_base_whose_id_differs_from_the_lock_is_refused(tmp_path: Path, docker_client) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads((REPO / "engine" / "llama.cpp.lock.json").read_text())
    raw["targets"]["cpu"]["base_digest"] = "sha256:" + "0" * 64
    lock_path = tmp_path / "lock.json"
    lock_path.write_text(json.dumps(raw))
    result = run_cli("image", "build", "--target", "cpu", "--source", "b10229", "--lock", str(lock_path))
    assert result.returncode == 3
    runtime = raw["targets"]["cpu"]["runtime_base"]
    assert result.stderr == (
        f"error: base image {runtime} is {docker_client.images.get(runtime).id}, the lock records "
        f"sha256:{'0' * 64}: refused (remake it with `appliance image base`, or record the new "
        "digest in the lock)\n"
    )
