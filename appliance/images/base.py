"""Registry-free Debian base images, made with mmdebstrap and loaded with a fixed image config.

No registry is reachable on build machines and air-gapped labs, so the `cpu` target's bases
are made locally: `mmdebstrap --variant=minbase` writes a root filesystem tarball under a fixed
SOURCE_DATE_EPOCH, and this module wraps it in a docker-archive whose image config is written
here with the same fixed date. The image ID is the sha256 of that config, so the same tarball
always yields the same ID (`docker import` would stamp the current time into it instead).

Three roles: `runtime` (minbase plus the OpenMP runtime), `build` (plus compilers, ccache,
cmake, ninja) and `runtime-slim`: only the named packages and what they depend on, extracted
without dpkg or apt (the `extract` variant), with base-passwd's users written in; enough for the
engine and the trial wrapper (`sh`, coreutils, `ldd`, `ldconfig`), about a third of `runtime`.
All drop documentation, manual pages and locales. A role's contents are part of its tag's
meaning: a change of contents takes a new role (and so a new tag).
"""

import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core.digests import canonical_json, sha256_bytes, sha256_file
from appliance.core.errors import ApplianceError

DEFAULT_EPOCH = 1772323200  # 2026-03-01T00:00:00Z
SUITE = "bookworm"
REPOSITORY = "moe-appliance/debian-{role}"
PACKAGES = {
    "runtime": ("libgomp1",),
    "build": ("build-essential", "ccache", "cmake", "ninja-build"),
    "runtime-slim": (
        "libgomp1",
        "libstdc++6",
        "dash",
        "bash",
        "coreutils",
        "libc-bin",
        "base-passwd",
        "base-files",
    ),
}
VARIANTS = {"runtime": "minbase", "build": "minbase", "runtime-slim": "extract"}
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
# The extract variant runs no dpkg and no customize hooks: the excludes are removed by an extract
# hook, and base-passwd's postinst (which writes /etc/passwd and /etc/group) is done by hand.
# The hooks keep the tarball reproducible: copies keep the package's mtimes (`cp -p`), and the
# folders they change get SOURCE_DATE_EPOCH back.
EXTRACT_HOOKS = (
    'rm -rf "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/locale "$1"/usr/share/info '
    '"$1"/usr/share/lintian',
    'cp -p "$1"/usr/share/base-passwd/passwd.master "$1"/etc/passwd',
    'cp -p "$1"/usr/share/base-passwd/group.master "$1"/etc/group',
    'touch -d "@$SOURCE_DATE_EPOCH" "$1"/usr/share "$1"/etc',
)
BASE_TAG_RE = re.compile(
    r"^moe-appliance/debian-(?P<role>runtime|build|runtime-slim):" + SUITE + r"-(?P<epoch>[0-9]+)$"
)
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseImage:
    """One loaded base image: its tag, image ID (sha256 of its config) and rootfs layer digest."""

    role: str
    tag: str
    image_id: str
    rootfs_sha256: str
    packages: tuple[str, ...]


def base_tag(role: str, epoch: int = DEFAULT_EPOCH, suite: str = SUITE) -> str:
    return f"{REPOSITORY.format(role=role)}:{suite}-{epoch}"


def mmdebstrap_command(role: str, out: Path, suite: str = SUITE) -> list[str]:
    if role not in PACKAGES:
        raise ApplianceError(f"unknown base role {role!r}: use one of {', '.join(PACKAGES)}")
    cmd = ["mmdebstrap", f"--variant={VARIANTS[role]}", f"--include={','.join(PACKAGES[role])}"]
    if VARIANTS[role] == "extract":
        cmd += [f"--extract-hook={hook}" for hook in EXTRACT_HOOKS]
    else:
        cmd += [f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES]
    return [*cmd, suite, str(out)]


def _architecture() -> str:
    result = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    return result.stdout.strip() or "amd64"


def image_config(rootfs_sha256: str, epoch: int, command: list[str]) -> bytes:
    """The image config JSON; its sha256 is the image ID docker reports after loading."""
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": _architecture(),
        "os": "linux",
        "created": created,
        "config": {"Env": [PATH_ENV], "Cmd": ["bash"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{rootfs_sha256}"]},
        "history": [{"created": created, "created_by": " ".join(command[:-1])}],
    }
    return canonical_json(config)


def _docker_load(rootfs: Path, config: bytes, tag: str) -> None:
    """Stream a docker-archive (manifest, config, one layer) into `docker load`."""
    image_id = sha256_bytes(config)
    layer = f"{sha256_file(rootfs)}/layer.tar"
    manifest = canonical_json([{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": [layer]}])
    proc = subprocess.Popen(
        ["docker", "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdin is not None
    try:
        with tarfile.open(fileobj=proc.stdin, mode="w|") as archive:
            for name, data in ((f"{image_id}.json", config), ("manifest.json", manifest)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            archive.add(rootfs, arcname=layer)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.wait() != 0:
        raise ApplianceError(f"docker load of {tag} failed: {output.strip().splitlines()[-1:]}")


def make_base(
    role: str, epoch: int = DEFAULT_EPOCH, log: Callable[[str], None] = print, workdir: Path | None = None
) -> BaseImage:
    """Run mmdebstrap for `role` under SOURCE_DATE_EPOCH=epoch and load the result, tagged."""
    tag = base_tag(role, epoch)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="base-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        command = mmdebstrap_command(role, rootfs)
        log(f"{tag}: {' '.join(command)}")
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch))
        try:
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env
            )
        except FileNotFoundError:
            raise ApplianceError("mmdebstrap not found: install it (apt-get install mmdebstrap)") from None
        if result.returncode != 0:
            tail = "; ".join(result.stderr.strip().splitlines()[-3:])
            raise ApplianceError(f"mmdebstrap for {tag} failed: {tail}")
        rootfs_sha256 = sha256_file(rootfs)
        config = image_config(rootfs_sha256, epoch, command)
        _docker_load(rootfs, config, tag)
    image_id = f"sha256:{sha256_bytes(config)}"
    log(f"{tag}: loaded {image_id} (rootfs sha256:{rootfs_sha256})")
    return BaseImage(role, tag, image_id, f"sha256:{rootfs_sha256}", PACKAGES[role])


def parse_base_tag(ref: str) -> tuple[str, int] | None:
    """(role, epoch) when `ref` names a base this module makes, else None."""
    match = BASE_TAG_RE.match(ref)
    return (match.group("role"), int(match.group("epoch"))) if match else None


def local_image(client: Any, ref: str) -> Any | None:
    """The local image `ref` names (a Docker SDK image), or None."""
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def image_present(ref: str) -> bool:
    result = subprocess.run(["docker", "image", "inspect", ref], capture_output=True)
    return result.returncode == 0


def ensure_base(ref: str, log: Callable[[str], None] = print) -> BaseImage | None:
    """Make the base `ref` names if it is one of ours and missing; None when nothing was made."""
    parsed = parse_base_tag(ref)
    if parsed is None or image_present(ref):
        return None
    role, epoch = parsed
    return make_base(role, epoch, log=log)


def record_in_lock(raw: dict[str, object], runtime: BaseImage, build: BaseImage) -> dict[str, object]:
    """A copy of the lock with the `cpu` target pointing at the two bases, by tag and ID."""
    new = json.loads(json.dumps(raw))
    cpu = new["targets"]["cpu"]
    cpu["build_base"] = build.tag
    cpu["build_base_digest"] = build.image_id
    cpu["runtime_base"] = runtime.tag
    cpu["base_digest"] = runtime.image_id
    return dict(new)
