"""A target's compile step proved on another build base (`appliance image check-compile`):
only the Dockerfile's build stage, built with BuildKit and removed afterwards.
"""

import shutil
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from appliance.core.errors import ApplianceError
from appliance.core.progress import Progress, ProgressFn
from appliance.engine.lock import Lock
from appliance.engine.patches import apply_series
from appliance.engine.source import fetch_source
from appliance.host.docker import docker_client
from appliance.images.builders import (
    DEFAULT_JOBS,
    BuildRequest,
    OnLine,
    build_args,
    build_lines,
    choose_builder,
    fetch_progress,
    images_cache,
    log_tail,
    resolve_base,
    run_buildkit,
)


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
    source = fetch_source(lock, source_spec, fetch_progress(source_spec, progress))
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
            lines = build_lines(task, log_path, progress, on_line)
            status = run_buildkit(
                client_path,
                BuildRequest(context, "", args, {}, log, lines),
                ["--target", "build", "--iidfile", str(iidfile)],
            )
    finally:
        shutil.rmtree(context, ignore_errors=True)
        if iidfile.exists():
            client.images.remove(iidfile.read_text().strip(), force=True)
            iidfile.unlink()
    if status != 0:
        raise ApplianceError(
            f"compile check for {target_name} failed; last lines:\n{log_tail(log_path)}\nfull log: {log_path}"
        )
    return log_path, time.monotonic() - started
