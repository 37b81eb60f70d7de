"""The machinery an engine image build and a compile check share: the Dockerfile and its build
arguments, the base images checked against the lock, the builder (BuildKit through a docker
client that has it, DOCKER_BUILDKIT=1, else the Docker SDK's classic builder), the build log
followed line by line with ninja's steps as progress, and its last lines when a build fails.
"""

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.errors import ApplianceError, IntegrityError
from appliance.core.paths import cache_dir, repo_root
from appliance.core.progress import BYTES, Progress, ProgressFn
from appliance.engine.lock import Target
from appliance.engine.tools import IMAGE_TOOLS
from appliance.host.docker import buildkit_client
from appliance.images.base import local_image

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


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
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


@dataclass(frozen=True)
class BuildRequest:
    """What either builder builds: the patched source tree, the tag ("" for none), the build
    arguments and labels, the open log and the callback that sees each line of it."""

    context: Path
    tag: str
    args: dict[str, str]
    labels: dict[str, str]
    log: Any
    on_line: OnLine | None


def run_buildkit(client_path: str, build: BuildRequest, extra: Sequence[str] = ()) -> int:
    cmd = [client_path, "build", "--progress=plain", "-f", str(dockerfile_path()), *extra]
    if build.tag:
        cmd += ["-t", build.tag]
    for key, value in build.args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    for key, value in build.labels.items():
        cmd += ["--label", f"{key}={value}"]
    cmd.append(str(build.context))
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, errors="replace"
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        build.log.write(line)
        if build.on_line:
            build.on_line(line.rstrip("\n"))
    return proc.wait()


def classic_dockerfile(text: str) -> str:
    """The Dockerfile without BuildKit cache mounts, which the classic builder rejects."""
    return CACHE_MOUNT_RE.sub("RUN ", text)


def run_classic(client: Any, build: BuildRequest) -> int:
    dockerfile = build.context.parent / f"{build.context.name}.classic.Dockerfile"
    dockerfile.write_text(classic_dockerfile(dockerfile_path().read_text()))
    try:
        stream = client.api.build(
            path=str(build.context),
            dockerfile=str(dockerfile),
            tag=build.tag,
            buildargs=build.args,
            labels=build.labels,
            rm=True,
            forcerm=True,
            decode=True,
        )
        failed = _follow_classic(stream, build.log, build.on_line)
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


def fetch_progress(spec: str, progress: ProgressFn | None) -> Any:
    if progress is None:
        return None

    def report(_: str, done: int, total: int | None) -> None:
        progress(Progress(f"fetching {spec}", done, total, BYTES))

    return report


def build_lines(task: str, log_path: Path, progress: ProgressFn | None, on_line: OnLine | None) -> OnLine:
    """Every build log line to on_line; ninja's `[n/m]` steps to progress, with the log path."""

    def line(text: str) -> None:
        if on_line is not None:
            on_line(text)
        step = ninja_progress(text)
        if step is not None and progress is not None:
            progress(Progress(task, step[0], step[1], log=log_path))

    return line


def ninja_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from a ninja `[N/M]` step in a build log line."""
    match = NINJA_STEP_RE.search(line)
    return (int(match.group(1)), int(match.group(2))) if match else None
