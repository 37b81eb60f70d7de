"""Registry-free base images: fixed image config, tags that round-trip, reproducible IDs."""

import json

import pytest

from appliance.engine.lock import load_lock
from appliance.images.base import (
    DEFAULT_EPOCH,
    base_tag,
    image_config,
    make_base,
    mmdebstrap_command,
    parse_base_tag,
)
from tests.conftest import run_cli


def test_image_config_depends_only_on_rootfs_digest_and_epoch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    command = mmdebstrap_command("runtime", tmp_path / "a.tar")
    same_command_elsewhere = mmdebstrap_command("runtime", tmp_path / "b.tar")
    first = image_config("ab" * 32, DEFAULT_EPOCH, command)
    assert first == image_config("ab" * 32, DEFAULT_EPOCH, same_command_elsewhere)
    assert first != image_config("ab" * 32, DEFAULT_EPOCH + 1, command)
    assert first != image_config("cd" * 32, DEFAULT_EPOCH, command)
    config = json.loads(first)
    assert config["created"] == "2026-03-01T00:00:00Z"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{'ab' * 32}"]}
    assert str(tmp_path) not in first.decode()


def test_roles_differ_only_in_packages(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runtime = mmdebstrap_command("runtime", tmp_path / "r.tar")
    build = mmdebstrap_command("build", tmp_path / "b.tar")
    assert "--variant=minbase" in runtime and "--include=libgomp1" in runtime
    assert "--include=build-essential,ccache,cmake,ninja-build" in build
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in runtime


def test_base_tags_round_trip_and_the_lock_names_them() -> None:
    assert parse_base_tag(base_tag("runtime", 123)) == ("runtime", 123)
    assert parse_base_tag(base_tag("build")) == ("build", DEFAULT_EPOCH)
    assert parse_base_tag("debian:bookworm-slim") is None
    cpu = load_lock().target("cpu")
    assert parse_base_tag(cpu.runtime_base) == ("runtime-slim", DEFAULT_EPOCH)
    assert parse_base_tag(cpu.build_base) == ("build", DEFAULT_EPOCH)


def test_the_slim_runtime_is_extracted_without_dpkg_and_writes_its_users(tmp_path) -> None:  # type: ignore[no-untyped-def]
    slim = mmdebstrap_command("runtime-slim", tmp_path / "s.tar")
    assert "--variant=extract" in slim
    assert "--include=libgomp1,libstdc++6,dash,bash,coreutils,libc-bin,base-passwd,base-files" in slim
    hooks = [arg for arg in slim if arg.startswith("--extract-hook=")]
    assert any("usr/share/doc" in hook and "rm -rf" in hook for hook in hooks)
    assert any("passwd.master" in hook for hook in hooks) and not any("dpkgopt" in a for a in slim)


@pytest.mark.docker
def test_the_slim_runtime_base_has_what_trials_need_and_no_package_manager(docker_client) -> None:  # type: ignore[no-untyped-def]
    from appliance.images.base import ensure_base

    tag = load_lock().target("cpu").runtime_base
    ensure_base(tag, log=lambda _: None)
    script = (
        "for c in sh bash date mv sleep id ldd ldconfig sha256sum readlink cut; do command -v $c >/dev/null "
        "|| echo missing $c; done; for c in apt-get perl; do command -v $c >/dev/null && echo has $c; done; "
        "id -un 65534; ls /usr/share/doc 2>&1 | head -1"
    )
    out = docker_client.containers.run(tag, ["sh", "-c", script], remove=True, network_mode="none").decode()
    assert out.splitlines()[0] == "nobody" and "missing" not in out and "has " not in out
    assert "No such file" in out
    assert docker_client.images.get(tag).attrs["Size"] < 40_000_000


@pytest.mark.docker
def test_a_nvidia_base_present_under_another_digest_is_refused_in_one_line(docker_client) -> None:  # type: ignore[no-untyped-def]
    """A local image under the pinned nvidia/cuda tag but without the pinned repository digest."""
    from appliance.images.base import ensure_base

    toolkit = load_lock().cuda_toolkit("12.8.1")
    by_tag, pinned = toolkit.build_base.split("@", 1)
    stand_in = base_tag("runtime")
    ensure_base(stand_in, log=lambda _: None)
    if docker_client.images.list(name=by_tag):
        pytest.fail(f"{by_tag} exists locally: this test tags it itself")
    docker_client.images.get(stand_in).tag(by_tag)
    try:
        result = run_cli("image", "build", "--target", "sm89", "--cuda", "12.8.1", "--source", "b10229")
    finally:
        docker_client.images.remove(by_tag)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"base image {by_tag} is present as" in lines[0] and f"the lock pins {pinned}: refused" in lines[0]


def test_unknown_role_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from appliance.core.errors import ApplianceError

    with pytest.raises(ApplianceError, match="unknown base role 'gpu'"):
        mmdebstrap_command("gpu", tmp_path / "x.tar")


@pytest.mark.docker
@pytest.mark.network
@pytest.mark.slow
def test_remaking_the_runtime_base_gives_the_same_image_id(docker_client) -> None:  # type: ignore[no-untyped-def]
    """mmdebstrap under SOURCE_DATE_EPOCH plus a fixed config: same mirror state, same image ID."""
    tag = load_lock().target("cpu").runtime_base
    parsed = parse_base_tag(tag)
    assert parsed is not None
    role, epoch = parsed
    present = [image.id for image in docker_client.images.list(name=tag)]
    before = present[0] if present else make_base(role, epoch, log=lambda _: None).image_id
    again = make_base(role, epoch, log=lambda _: None)
    assert again.image_id == before == docker_client.images.get(tag).id


def test_base_without_mmdebstrap_on_path_is_a_one_line_error() -> None:
    result = run_cli("image", "base", env={"PATH": "/nonexistent"})
    assert result.returncode == 1
    assert result.stderr == "error: mmdebstrap not found: install it (apt-get install mmdebstrap)\n"


def test_recording_bases_pins_the_cpu_target_by_tag_and_id(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from appliance.engine.lock import write_lock
    from appliance.images.base import BaseImage, record_in_lock

    lock = load_lock()
    runtime = BaseImage(
        "runtime", base_tag("runtime", 7), "sha256:" + "a" * 64, "sha256:" + "b" * 64, ("libgomp1",)
    )
    build = BaseImage(
        "build", base_tag("build", 7), "sha256:" + "c" * 64, "sha256:" + "d" * 64, ("build-essential",)
    )
    path = tmp_path / "lock.json"
    write_lock(record_in_lock(lock.raw, runtime, build), path)
    recorded = load_lock(path)
    cpu = recorded.target("cpu")
    assert (cpu.runtime_base, cpu.base_digest) == (runtime.tag, runtime.image_id)
    assert cpu.build_base == build.tag
    assert recorded.raw["targets"]["cpu"]["build_base_digest"] == build.image_id
    assert recorded.targets["sm120"] == lock.targets["sm120"]
    assert lock.target("cpu").base_digest is None  # the loaded lock itself is not modified
