"""Registry-free CUDA bases: a CUDA toolkit assembled from PyPI wheels the lock pins by sha256.

A `pypi-wheels` toolkit of the lock (`cuda_toolkits`) gives two bases, both made locally:

- the CUDA build base: the Debian build base plus every `build` wheel unpacked into
  `/usr/local/cuda` (nvcc, cicc, ptxas, headers, CCCL, cudart, cuBLAS), laid out the way
  `nvcc.profile` expects (`lib64` beside `lib`, unversioned `.so` links for the linker);
- the CUDA runtime base: the Debian runtime base plus only the shared libraries of CUDA's
  runtime and cuBLAS (`RUNTIME_LIBRARIES`), nothing else of the toolkit.

Every wheel is fetched (PyPI through pip, or a local folder for air-gapped machines) into the
cache and hashed before Docker is called; a wheel whose sha256 differs from the lock is deleted
from the cache and refused in one line, so nothing unverified is ever built on or kept. Neither
base has the driver (`libcuda.so.1`): the NVIDIA container runtime mounts it from the host, and
the engine is built with `GGML_CUDA_NO_VMM=ON` so that linking needs no driver stub.
"""

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.digests import canonical_json, sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import cache_dir, repo_root
from appliance.engine.lock import CudaToolkit, Lock, Wheel
from appliance.images import labels as L
from appliance.images.base import DEFAULT_EPOCH, SUITE, base_tag, ensure_base, local_image

ROLES = ("build", "runtime")
DEBIAN_ROLE = {"build": "build", "runtime": "runtime-slim"}
CUDA_BASE_TAG_RE = re.compile(
    r"^moe-appliance/cuda-(?P<role>build|runtime):(?P<cuda>[0-9]+\.[0-9]+\.[0-9]+)-"
    + SUITE
    + r"-(?P<epoch>[0-9]+)$"
)
TOOLKIT_DIRS = ("bin", "include", "lib", "nvvm")
RUNTIME_LIBRARIES = ("libcudart.so.", "libcublas.so.", "libcublasLt.so.")
PREFIX = "/usr/local/cuda"

Log = Callable[[str], None]


def cuda_base_tag(role: str, cuda_version: str, epoch: int = DEFAULT_EPOCH) -> str:
    return f"moe-appliance/cuda-{role}:{cuda_version}-{SUITE}-{epoch}"


def parse_cuda_base_tag(ref: str) -> tuple[str, str, int] | None:
    """(role, CUDA version, epoch) when `ref` names a CUDA base this module makes, else None."""
    match = CUDA_BASE_TAG_RE.match(ref)
    return (match.group("role"), match.group("cuda"), int(match.group("epoch"))) if match else None


def dockerfile_path() -> Path:
    return repo_root() / "containers" / "cuda-base.Dockerfile"


def wheels_cache() -> Path:
    return cache_dir() / "wheels"


def wheels_digest(wheels: tuple[Wheel, ...]) -> str:
    """The label value naming wheels by sha256: canonical JSON {file: sha256}."""
    return canonical_json({w.file: w.sha256 for w in wheels}).decode()


def _pip_download(wheel: Wheel, into: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    result = subprocess.run(
        [*cmd, "-d", str(into), wheel.requirement], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        last = next((ln for ln in reversed(result.stderr.splitlines()) if ln.startswith("ERROR")), "")
        raise ApplianceError(
            f"cannot fetch wheel {wheel.requirement} from PyPI ({last or 'pip failed'}): "
            "on a machine without PyPI pass --wheels DIR holding the lock's wheel files"
        )


def fetch_wheel(wheel: Wheel, source: Path | None, log: Log) -> Path:
    """The cached, verified file of `wheel`: fetched (PyPI or `source`) when missing, hashed always."""
    dest = wheels_cache() / wheel.file
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
            got = Path(tmp) / wheel.file
            if source is not None:
                if not (source / wheel.file).is_file():
                    raise ApplianceError(
                        f"wheel {wheel.file} ({wheel.requirement}) is missing from {source}: "
                        f"put it there (`pip download --no-deps {wheel.requirement}`) or leave out --wheels"
                    )
                shutil.copyfile(source / wheel.file, got)
            else:
                log(f"fetching {wheel.requirement} from PyPI")
                _pip_download(wheel, Path(tmp))
                if not got.is_file():
                    fetched = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
                    raise ApplianceError(
                        f"pip fetched {fetched} for {wheel.requirement}, not the file the lock names "
                        f"({wheel.file}): correct the lock's file name"
                    )
            got.rename(dest)
    actual = sha256_file(dest)
    if actual != wheel.sha256:
        dest.unlink()
        raise IntegrityError(
            f"wheel {wheel.file} has sha256 {actual}, the lock pins {wheel.sha256}: refused and "
            "removed from the cache (check where it came from, or correct the lock)"
        )
    return dest


def fetch_wheels(toolkit: CudaToolkit, source: Path | None = None, log: Log = print) -> dict[str, Path]:
    """Every wheel of a `pypi-wheels` toolkit, verified: file name -> cached path."""
    if toolkit.kind != "pypi-wheels":
        raise ConfigError(f"CUDA {toolkit.version} comes from {toolkit.kind} images, not from wheels")
    return {w.file: fetch_wheel(w, source, log) for w in toolkit.wheels}


def _extract(wheel_path: Path, into: Path, keep: Callable[[str], bool]) -> None:
    """Unpack the `nvidia/<name>/...` files of a wheel that `keep` accepts (path below that
    folder) into `into`, with their executable bits."""
    with zipfile.ZipFile(wheel_path) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if len(parts) < 3 or parts[0] != "nvidia" or info.is_dir():
                continue
            rel = "/".join(parts[2:])
            if ".." in parts or not keep(rel):
                continue
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode if mode else 0o644)


def _link_libraries(lib: Path) -> None:
    """`libX.so -> libX.so.N` for each versioned library (the linker looks for `libX.so`)."""
    for path in sorted(lib.glob("lib*.so.*")):
        link = lib / (path.name.split(".so.", 1)[0] + ".so")
        if not link.exists():
            link.symlink_to(path.name)


def assemble_context(toolkit: CudaToolkit, role: str, wheels: dict[str, Path], context: Path) -> None:
    """The docker build context of one CUDA base: `cuda/` as it will sit in /usr/local/cuda."""
    cuda = context / "cuda"
    cuda.mkdir(parents=True)
    for wheel in toolkit.wheels_for(role):
        if role == "build":
            _extract(wheels[wheel.file], cuda, lambda rel: rel.split("/", 1)[0] in TOOLKIT_DIRS)
        else:
            _extract(
                wheels[wheel.file],
                cuda,
                lambda rel: rel.startswith("lib/") and rel[4:].startswith(RUNTIME_LIBRARIES),
            )
    (cuda / "lib").mkdir(exist_ok=True)
    _link_libraries(cuda / "lib")
    if role == "build":
        (cuda / "lib64").symlink_to("lib")
        if not (cuda / "bin" / "nvcc").is_file():
            raise ApplianceError(
                f"the build wheels of CUDA {toolkit.version} hold no bin/nvcc: check the lock"
            )


@dataclass(frozen=True)
class CudaBase:
    role: str
    tag: str
    image_id: str
    on: str


def base_labels(toolkit: CudaToolkit, role: str) -> dict[str, str]:
    return {
        L.CUDA_VERSION: toolkit.version,
        L.BASE_KIND: toolkit.kind,
        L.MIN_DRIVER: toolkit.min_driver,
        L.CUDA_WHEELS: wheels_digest(toolkit.wheels_for(role)),
    }


def _docker_build(context: Path, tag: str, base: str, labels: dict[str, str]) -> str:
    """Build the base with the SDK's classic builder (one COPY; no cache mounts needed)."""
    import docker.errors

    from appliance.host.docker import docker_client

    client = docker_client()
    try:
        image, _ = client.images.build(
            path=str(context),
            dockerfile=str(dockerfile_path()),
            tag=tag,
            buildargs={"BASE": base, "PREFIX": PREFIX},
            labels=labels,
            rm=True,
            forcerm=True,
        )
    except docker.errors.BuildError as exc:
        raise ApplianceError(f"docker build of {tag} failed: {exc.msg}") from None
    except docker.errors.APIError as exc:
        raise ApplianceError(f"docker build of {tag} failed: {exc.explanation or exc}") from None
    return str(image.id)


def make_cuda_bases(
    lock: Lock,
    cuda_version: str,
    roles: tuple[str, ...] = ROLES,
    source: Path | None = None,
    epoch: int = DEFAULT_EPOCH,
    log: Log = print,
) -> list[CudaBase]:
    """Fetch and verify every wheel of the toolkit first, then make each base that is missing or
    was made from other wheels (and the Debian base it sits on, when missing)."""
    toolkit = lock.cuda_toolkit(cuda_version)
    tags = {"build": toolkit.build_base, "runtime": toolkit.runtime_base}
    for role in roles:
        if tags[role] != cuda_base_tag(role, toolkit.version, epoch):
            raise ConfigError(
                f"the lock names {tags[role]} as CUDA {toolkit.version}'s {role} base, not "
                f"{cuda_base_tag(role, toolkit.version, epoch)}: correct cuda_toolkits or --epoch"
            )
    wheels = fetch_wheels(toolkit, source, log)
    log(f"CUDA {toolkit.version}: {len(wheels)} wheels verified against the lock")
    from appliance.host.docker import docker_client

    client = docker_client()
    made = []
    for role in roles:
        on = base_tag(DEBIAN_ROLE[role], epoch)
        present = local_image(client, tags[role])
        if present is not None and (present.labels or {}).get(L.CUDA_WHEELS) == wheels_digest(
            toolkit.wheels_for(role)
        ):
            # kept: remaking it would give a new image ID (classic builder) and so a rebuild
            # of every GPU image on it
            log(f"{tags[role]}: present and made from the lock's wheels ({present.id})")
            made.append(CudaBase(role, tags[role], str(present.id), on))
            continue
        ensure_base(on, log=log)
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="cuda-base-") as tmp:
            assemble_context(toolkit, role, wheels, Path(tmp))
            log(f"{tags[role]}: building on {on}")
            image_id = _docker_build(Path(tmp), tags[role], on, base_labels(toolkit, role))
        log(f"{tags[role]}: {image_id}")
        made.append(CudaBase(role, tags[role], image_id, on))
    return made


def ensure_cuda_bases(lock: Lock, cuda_version: str, client: Any, log: Log = print) -> list[CudaBase]:
    """Make the CUDA bases of a `pypi-wheels` toolkit that are missing; check the present ones'
    wheel labels against the lock (a base made from other wheels is refused)."""
    toolkit = lock.cuda_toolkit(cuda_version)
    if toolkit.kind != "pypi-wheels":
        return []
    missing = []
    for role, ref in (("build", toolkit.build_base), ("runtime", toolkit.runtime_base)):
        image = local_image(client, ref)
        if image is None:
            missing.append(role)
            continue
        recorded = (image.labels or {}).get(L.CUDA_WHEELS)
        expected = wheels_digest(toolkit.wheels_for(role))
        if recorded != expected:
            raise IntegrityError(
                f"base image {ref} was made from other wheels than the lock pins: refused "
                f"(remove it with `docker rmi {ref}` and run `appliance image base --cuda {cuda_version}`)"
            )
    if not missing:
        return []
    parsed = parse_cuda_base_tag(toolkit.build_base)
    epoch = parsed[2] if parsed else DEFAULT_EPOCH
    return make_cuda_bases(lock, cuda_version, tuple(missing), epoch=epoch, log=log)
