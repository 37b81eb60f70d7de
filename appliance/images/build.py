"""Engine images: build one target from a verified, patched source; inspect; self-test.

A build fetches and verifies the source, applies the patch series into a private build
context, and runs `containers/engine.Dockerfile` with the target's build arguments from the
lock. BuildKit through a docker client that has it (DOCKER_BUILDKIT=1), else the Docker SDK's
classic builder. The full log is kept under the cache; a failure shows its last lines.
An image whose inputs digest label equals the planned build's is reused, not rebuilt.
"""

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core.digests import sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import cache_dir, repo_root
from appliance.core.progress import BYTES, Progress, ProgressFn
from appliance.engine.lock import Lock, Target
from appliance.engine.patches import apply_series, series_digest
from appliance.engine.source import SourceTree, fetch_source
from appliance.engine.tools import IMAGE_BIN_DIR, IMAGE_LIB_DIR, IMAGE_TOOLS
from appliance.host.containers import Kind, Lifecycle
from appliance.host.docker import buildkit_client, docker_client
from appliance.images import labels as L
from appliance.images.base import ensure_base, local_image
from appliance.images.cuda_base import ensure_cuda_bases

DEFAULT_JOBS = 2
LOG_TAIL_LINES = 15
BUILDERS = ("auto", "buildkit", "classic")
NINJA_STEP_RE = re.compile(r"\[(\d+)/(\d+)\]")
CACHE_MOUNT_RE = re.compile(r"^RUN --mount=type=cache,\S+ ", re.MULTILINE)

OnLine = Callable[[str], None]


def dockerfile_path() -> Path:
    return repo_root() / "containers" / "engine.Dockerfile"


def images_cache() -> Path:
    return cache_dir() / "images"


@dataclass
class BuildResult:
    tag: str
    image_id: str
    reused: bool
    builder: str
    labels: dict[str, str]
    log_path: Path | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _recorded_base_digests(lock: Lock, target: Target) -> tuple[str | None, str | None]:
    return target.build_base_digest, target.base_digest


def resolve_base(client: Any, ref: str, recorded: str | None) -> str:
    """The local image ID of a base, checked against the digest the lock records (if any);
    a `REPO:TAG@sha256:...` reference must be present under that repository digest."""
    if "@sha256:" in ref:
        by_tag, pinned = ref.split("@", 1)
        tagged = local_image(client, by_tag)
        digests = [
            d.split("@", 1)[1] for d in (tagged.attrs.get("RepoDigests", []) if tagged else []) if "@" in d
        ]
        if tagged is not None and pinned not in digests:
            raise IntegrityError(
                f"base image {by_tag} is present as {', '.join(digests) or tagged.id}, the lock pins "
                f"{pinned}: refused (`docker pull {ref}`)"
            )
    image = local_image(client, ref)
    if image is None:
        how = (
            "run `appliance image base` (makes it without a registry)"
            if ref.startswith("moe-appliance/")
            else f"`docker pull {ref}` where a registry is reachable, or `docker load` it"
        )
        raise ApplianceError(f"base image {ref} is not present locally: {how}")
    repo_digests = [d.split("@", 1)[1] for d in image.attrs.get("RepoDigests", []) if "@" in d]
    if recorded and recorded != image.id and recorded not in repo_digests:
        raise IntegrityError(
            f"base image {ref} is {image.id}, the lock records {recorded}: refused "
            "(remake it with `appliance image base`, or record the new digest in the lock)"
        )
    return str(image.id)


def build_args(target: Target) -> dict[str, str]:
    """The Dockerfile's build arguments for a target (JOBS excluded: it does not change output)."""
    return {
        "BUILD_BASE": target.build_base,
        "RUNTIME_BASE": target.runtime_base,
        "CMAKE_ARGS": " ".join(target.cmake_args),
        "CUDA_ARCHITECTURES": target.cuda.architectures if target.cuda else "",
        "TOOLS": " ".join(IMAGE_TOOLS),
    }


def plan_inputs(
    lock: Lock, target: Target, source: SourceTree, client: Any, experimental: Sequence[str] = ()
) -> L.BuildInputs:
    build_recorded, runtime_recorded = _recorded_base_digests(lock, target)
    dockerfile = dockerfile_path()
    if not dockerfile.is_file():
        raise ConfigError(f"{dockerfile} not found: run from the project checkout or set APPLIANCE_ROOT")
    return L.BuildInputs(
        lock_digest=lock.digest,
        target=target,
        identity=source.identity,
        series_digest=series_digest(lock, experimental),
        experimental=tuple(experimental),
        dockerfile_sha256=sha256_file(dockerfile),
        build_base_id=resolve_base(client, target.build_base, build_recorded),
        runtime_base_id=resolve_base(client, target.runtime_base, runtime_recorded),
        build_args=build_args(target),
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def choose_builder(requested: str) -> tuple[str, str | None]:
    """("buildkit", client path) or ("classic", None); `buildkit` fails if no client has it."""
    if requested not in BUILDERS:
        raise ApplianceError(f"unknown builder {requested!r}: use one of {', '.join(BUILDERS)}")
    found = buildkit_client() if requested != "classic" else None
    if found:
        return "buildkit", found[0]
    if requested == "buildkit":
        raise ApplianceError(
            "no docker client with BuildKit found: install Debian's docker.io client (or the "
            "buildx plugin), or pass --builder classic"
        )
    return "classic", None


def _run_buildkit(
    client_path: str,
    context: Path,
    tag: str,
    args: dict[str, str],
    labels: dict[str, str],
    log: Any,
    on_line: OnLine | None,
    extra: Sequence[str] = (),
) -> int:
    cmd = [client_path, "build", "--progress=plain", "-f", str(dockerfile_path()), *extra]
    if tag:
        cmd += ["-t", tag]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    for key, value in labels.items():
        cmd += ["--label", f"{key}={value}"]
    cmd.append(str(context))
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, errors="replace"
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        if on_line:
            on_line(line.rstrip("\n"))
    return proc.wait()


def classic_dockerfile(text: str) -> str:
    """The Dockerfile without BuildKit cache mounts, which the classic builder rejects."""
    return CACHE_MOUNT_RE.sub("RUN ", text)


def _run_classic(
    client: Any,
    context: Path,
    tag: str,
    args: dict[str, str],
    labels: dict[str, str],
    log: Any,
    on_line: OnLine | None,
) -> int:
    dockerfile = context.parent / f"{context.name}.classic.Dockerfile"
    dockerfile.write_text(classic_dockerfile(dockerfile_path().read_text()))
    try:
        stream = client.api.build(
            path=str(context),
            dockerfile=str(dockerfile),
            tag=tag,
            buildargs=args,
            labels=labels,
            rm=True,
            forcerm=True,
            decode=True,
        )
        failed = _follow_classic(stream, log, on_line)
    finally:
        dockerfile.unlink(missing_ok=True)
    return failed


def _follow_classic(stream: Any, log: Any, on_line: OnLine | None) -> int:
    failed = 0
    for chunk in stream:
        text = chunk.get("stream") or chunk.get("status") or ""
        if "error" in chunk:
            failed, text = 1, f"ERROR: {chunk['error']}\n"
        log.write(text)
        for line in text.splitlines():
            if on_line:
                on_line(line)
    return failed


def _fetch_progress(spec: str, progress: ProgressFn | None) -> Any:
    if progress is None:
        return None

    def report(_: str, done: int, total: int | None) -> None:
        progress(Progress(f"fetching {spec}", done, total, BYTES))

    return report


def _base_log(ref: str, progress: ProgressFn | None, on_line: OnLine | None) -> OnLine:
    def log(line: str) -> None:
        if progress is not None:
            progress(Progress(f"making base image {ref}", 0, None))
        if on_line is not None:
            on_line(line)

    return log


def _build_lines(task: str, log_path: Path, progress: ProgressFn | None, on_line: OnLine | None) -> OnLine:
    """Every build log line to on_line; ninja's `[n/m]` steps to progress, with the log path."""

    def line(text: str) -> None:
        if on_line is not None:
            on_line(text)
        step = ninja_progress(text)
        if step is not None and progress is not None:
            progress(Progress(task, step[0], step[1], log=log_path))

    return line


def build_image(
    lock: Lock,
    target_name: str,
    source_spec: str,
    experimental: Sequence[str] = (),
    jobs: int = DEFAULT_JOBS,
    builder: str = "auto",
    on_line: OnLine | None = None,
    progress: ProgressFn | None = None,
    cuda_version: str | None = None,
) -> BuildResult:
    """Build (or reuse) the engine image for one target from a verified, patched source.

    `cuda_version` builds a GPU target on another CUDA toolkit of the lock (None: its own).
    `on_line` gets every build log line; `progress` the fetch, base and compile steps."""
    target = lock.target_on(target_name, cuda_version)
    client = docker_client()
    source = fetch_source(lock, source_spec, _fetch_progress(source_spec, progress))
    notes = list(source.notes)
    if target.cuda is not None and target.cuda.base_kind == "pypi-wheels":
        made_cuda = ensure_cuda_bases(
            lock, target.cuda.version, client, log=_base_log(target.build_base, progress, on_line)
        )
        notes.append(
            f"CUDA {target.cuda.version} from PyPI wheels pinned in the lock (registry-free bases, "
            f"driver {target.cuda.min_driver} or newer); nvidia/cuda bases: --cuda "
            + ", ".join(v for v, t in lock.cuda_toolkits.items() if t.kind == "nvidia-cuda")
        )
        notes += [f"made base image {base.tag} ({base.image_id})" for base in made_cuda]
    made = [
        ensure_base(ref, log=_base_log(ref, progress, on_line))
        for ref in (target.runtime_base, target.build_base)
    ]
    inputs = plan_inputs(lock, target, source, client, experimental)
    default = lock.target(target_name).cuda
    variant = (
        target.cuda.version if target.cuda and default and target.cuda.version != default.version else ""
    )
    tag = L.image_tag(lock, target_name, source.identity, experimental, inputs.series_digest, variant)
    existing = local_image(client, tag)
    if existing is not None and existing.labels.get(L.INPUTS_DIGEST) == inputs.digest():
        return BuildResult(tag, existing.id, True, "none", existing.labels, notes=notes)
    notes += [f"made base image {base.tag} ({base.image_id})" for base in made if base]

    kind, client_path = choose_builder(builder)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = images_cache() / "logs" / f"{tag.split(':', 1)[1]}-{stamp}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    context = images_cache() / "contexts" / inputs.digest()[:16]
    if context.exists():
        shutil.rmtree(context)
    try:
        patched = apply_series(lock, source, context, experimental)
        if not (patched.path / "tools" / "moe-trace").is_dir():
            raise ApplianceError(
                "the patched tree has no tools/moe-trace: the active series must carry the "
                "llama-moe-trace patch (check patches/llama.cpp/series)"
            )
        labels = L.expected_labels(lock, inputs, _now())
        args = {**inputs.build_args, "JOBS": str(jobs)}
        task = f"compiling {target_name}"
        if progress is not None:
            progress(Progress(task, 0, None, log=log_path))
        lines = _build_lines(task, log_path, progress, on_line)
        with open(log_path, "w", buffering=1) as log:
            log.write(f"# appliance image build {target_name} -> {tag} ({kind} builder)\n")
            if kind == "buildkit":
                assert client_path is not None
                status = _run_buildkit(client_path, context, tag, args, labels, log, lines)
            else:
                status = _run_classic(client, context, tag, args, labels, log, lines)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    if status != 0:
        raise ApplianceError(
            f"image build for {target_name} failed; last lines:\n{_tail(log_path)}\nfull log: {log_path}"
        )
    image = local_image(client, tag)
    if image is None or image.labels.get(L.INPUTS_DIGEST) != inputs.digest():
        raise ApplianceError(f"the build reported success but {tag} is missing; full log: {log_path}")
    return BuildResult(
        tag, image.id, False, kind, image.labels, log_path, time.monotonic() - started, notes=notes
    )


def ninja_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from a ninja `[N/M]` step in a build log line."""
    match = NINJA_STEP_RE.search(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def compile_check(
    lock: Lock,
    target_name: str,
    source_spec: str,
    build_base: str,
    extra_cmake_args: Sequence[str] = (),
    jobs: int = DEFAULT_JOBS,
    on_line: OnLine | None = None,
    progress: ProgressFn | None = None,
) -> tuple[Path, float]:
    """Build only the Dockerfile's build stage for a target on another build base; keep nothing.

    Proves a target's compile step (e.g. CUDA for sm120) where its real base images cannot be
    pulled: `build_base` is a locally made toolchain image. Returns the log path and seconds.
    """
    target = lock.target(target_name)
    client = docker_client()
    resolve_base(client, build_base, None)
    _, client_path = choose_builder("buildkit")
    assert client_path is not None
    source = fetch_source(lock, source_spec, _fetch_progress(source_spec, progress))
    args = {
        **build_args(target),
        "BUILD_BASE": build_base,
        "RUNTIME_BASE": build_base,
        "CMAKE_ARGS": " ".join([*target.cmake_args, *extra_cmake_args]),
        "JOBS": str(jobs),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = images_cache() / "logs" / f"check-{target_name}-{stamp}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    context = images_cache() / "contexts" / f"check-{target_name}-{stamp}"
    iidfile = log_path.with_suffix(".iid")
    started = time.monotonic()
    try:
        apply_series(lock, source, context)
        with open(log_path, "w", buffering=1) as log:
            log.write(f"# compile check {target_name} on {build_base}: {args}\n")
            task = f"compiling {target_name} on {build_base}"
            if progress is not None:
                progress(Progress(task, 0, None, log=log_path))
            lines = _build_lines(task, log_path, progress, on_line)
            status = _run_buildkit(
                client_path,
                context,
                "",
                args,
                {},
                log,
                lines,
                ["--target", "build", "--iidfile", str(iidfile)],
            )
    finally:
        shutil.rmtree(context, ignore_errors=True)
        if iidfile.exists():
            client.images.remove(iidfile.read_text().strip(), force=True)
            iidfile.unlink()
    if status != 0:
        raise ApplianceError(
            f"compile check for {target_name} failed; last lines:\n{_tail(log_path)}\nfull log: {log_path}"
        )
    return log_path, time.monotonic() - started


# --- inspect ---------------------------------------------------------------------------------


@dataclass
class InspectReport:
    ref: str
    image_id: str
    size_bytes: int
    labels: dict[str, str]
    drifts: list[L.Drift]

    @property
    def matches(self) -> bool:
        return not self.drifts


def inspect_labels(
    lock: Lock, ref: str, labels: dict[str, str], image_id: str = "", size_bytes: int = 0
) -> InspectReport:
    """Compare labels with the lock and the series (with the image's experimental patches)."""
    experimental = L.experimental_of_labels(labels)
    try:
        series = series_digest(lock, experimental)
    except ApplianceError as exc:
        series = f"(series not computable: {exc})"
    return InspectReport(ref, image_id, size_bytes, labels, L.compare(lock, labels, series))


def inspect_image(lock: Lock, ref: str, client: Any | None = None) -> InspectReport:
    """Inspect an image by reference, or by target name (its local image for this lock)."""
    client = client or docker_client()
    if ref in lock.targets:
        found = [tag for tag in L.candidate_tags(lock, ref) if local_image(client, tag) is not None]
        if not found:
            raise ApplianceError(
                f"no local {ref} engine image of this lock: build it (`make image-{ref}`) "
                "or `appliance pull` it"
            )
        ref = found[0]
    image = local_image(client, ref)
    if image is None:
        raise ApplianceError(
            f"no local image {ref}: build it (`appliance image build`) or `appliance pull` it"
        )
    return inspect_labels(lock, ref, dict(image.labels or {}), image.id, int(image.attrs.get("Size", 0)))


def drift_message(report: InspectReport) -> str:
    meanings = "; ".join(sorted({d.meaning for d in report.drifts}))
    target = report.labels.get(L.TARGET, "TARGET")
    return (
        f"image {report.ref} does not match the lock ({meanings}): rebuild it with "
        f"`appliance image build --target {target}`"
    )


# --- self-test -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelftestCheck:
    name: str
    ok: bool
    detail: str


def _exec(container: Any, cmd: list[str]) -> tuple[int, str]:
    result = container.exec_run(cmd, demux=False)
    return int(result.exit_code), (result.output or b"").decode(errors="replace")


# The one library an image may leave unresolved: the NVIDIA driver's, which the container
# runtime mounts from the host when a GPU is requested.
DRIVER_LIBRARY = "libcuda.so.1"
CUDA_BACKEND_MODULE = f"{IMAGE_LIB_DIR}/libggml-cuda.so"


def _unresolved(ldd_output: str) -> list[str]:
    """Libraries ldd could not find, the driver's left out."""
    return [
        line.split()[0]
        for line in ldd_output.splitlines()
        if "not found" in line and line.split()[0] != DRIVER_LIBRARY
    ]


def selftest_spec(ref: str) -> dict[str, Any]:
    """The self-test kind's configure hook (host.containers): the image, idle while the checks
    exec into it."""
    return {"image": ref, "command": ["sleep", "600"], "detach": True}


def selftest(ref: str, client: Any | None = None) -> list[SelftestCheck]:
    """Run each tool's --help; ldd every tool and every library of the image (only the driver's
    libcuda.so.1 may be missing); the CUDA backend module in GPU images; non-root, no compiler."""
    import docker.errors

    client = client or docker_client()
    image = local_image(client, ref)
    if image is None:
        raise ApplianceError(f"no local image {ref}: build or pull it first")
    gpu = bool((image.labels or {}).get(L.CUDA_VERSION))
    checks: list[SelftestCheck] = []
    with Lifecycle(client, Kind.SELFTEST) as box:
        try:
            container = box.start(selftest_spec(ref))
        except docker.errors.APIError as exc:
            raise ApplianceError(f"cannot start {ref}: {exc.explanation or exc}") from None
        for tool in IMAGE_TOOLS:
            code, out = _exec(container, [tool, "--help"])
            first = next((line for line in out.splitlines() if line.strip()), "")
            checks.append(SelftestCheck(f"{tool} --help", code == 0, f"exit {code}: {first[:80]}"))
        # files only: a library's version links would repeat its ldd
        listing = f'for f in {IMAGE_LIB_DIR}/*.so*; do [ -L "$f" ] || echo "$f"; done'
        code, out = _exec(container, ["sh", "-c", listing])
        libraries = out.split() if code == 0 else []
        for path in [f"{IMAGE_BIN_DIR}/{tool}" for tool in IMAGE_TOOLS] + libraries:
            code, out = _exec(container, ["ldd", path])
            missing = _unresolved(out)
            libs = len([line for line in out.splitlines() if "=>" in line])
            checks.append(
                SelftestCheck(
                    f"{path.rsplit('/', 1)[1]} libraries",
                    code == 0 and not missing,
                    f"missing: {', '.join(missing)}" if missing else f"{libs} resolved",
                )
            )
        if gpu:
            present = CUDA_BACKEND_MODULE in libraries
            checks.append(
                SelftestCheck("CUDA backend module", present, CUDA_BACKEND_MODULE if present else "missing")
            )
        code, out = _exec(container, ["id", "-u"])
        checks.append(
            SelftestCheck("non-root user", code == 0 and out.strip() not in ("", "0"), f"uid {out.strip()}")
        )
        found = []
        for compiler in ("cc", "gcc", "g++", "c++", "clang", "nvcc", "cmake"):
            if _exec(container, ["sh", "-c", f"command -v {compiler}"])[0] == 0:
                found.append(compiler)
        checks.append(
            SelftestCheck("no compiler", not found, f"found {', '.join(found)}" if found else "none found")
        )
    return checks
