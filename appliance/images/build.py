"""Engine images: build one target from a verified, patched source.

A build fetches and verifies the source, applies the patch series into a private build
context, and runs `containers/engine.Dockerfile` with the target's build arguments from the
lock, through one of `appliance.images.builders`. The full log is kept under the cache; a
failure shows its last lines. An image whose inputs digest label equals the planned build's is
reused, not rebuilt.
"""

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.core.digests import sha256_file
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.progress import Progress, ProgressFn
from appliance.engine.lock import CANONICAL_TRACK, Lock, Target
from appliance.engine.patches import apply_series, series_digest
from appliance.engine.source import SourceTree, fetch_source
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.base import ensure_base, local_image
from appliance.images.builders import (
    DEFAULT_JOBS,
    BuildRequest,
    OnLine,
    build_args,
    build_lines,
    choose_builder,
    dockerfile_path,
    fetch_progress,
    images_cache,
    log_tail,
    resolve_base,
    run_buildkit,
    run_classic,
)
from appliance.images.cuda_base import ensure_cuda_bases


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


def _base_log(ref: str, progress: ProgressFn | None, on_line: OnLine | None) -> OnLine:
    def log(line: str) -> None:
        if progress is not None:
            progress(Progress(f"making base image {ref}", 0, None))
        if on_line is not None:
            on_line(line)

    return log


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
    track = lock.track_of_source(source_spec)
    if track != CANONICAL_TRACK:
        raise ConfigError(
            f"source {source_spec} is the {track} track's: its images (labels, tags and bundles that "
            f"name the track) are not built yet; build it on the host with `appliance engine build "
            f"--local --source {source_spec}`, or build an image from the canonical track"
        )
    client = docker_client()
    source = fetch_source(lock, source_spec, fetch_progress(source_spec, progress))
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
        lines = build_lines(task, log_path, progress, on_line)
        with open(log_path, "w", buffering=1) as log:
            log.write(f"# appliance image build {target_name} -> {tag} ({kind} builder)\n")
            build = BuildRequest(context, tag, args, labels, log, lines)
            if kind == "buildkit":
                assert client_path is not None
                status = run_buildkit(client_path, build)
            else:
                status = run_classic(client, build)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    if status != 0:
        raise ApplianceError(
            f"image build for {target_name} failed; last lines:\n{log_tail(log_path)}\nfull log: {log_path}"
        )
    image = local_image(client, tag)
    if image is None or image.labels.get(L.INPUTS_DIGEST) != inputs.digest():
        raise ApplianceError(f"the build reported success but {tag} is missing; full log: {log_path}")
    return BuildResult(
        tag, image.id, False, kind, image.labels, log_path, time.monotonic() - started, notes=notes
    )
