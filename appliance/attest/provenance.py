"""Provenance of a run: the host, the image and its binaries, the engine, model and schedule.

Everything recorded here is sanitized: no host paths, user names or host names. Image paths
(inside the container) are kept, since they identify the image, not the user's machine.
`collect_provenance` assembles `RUN/provenance.json` from the run directory's inputs plus the
host and image facts; `collect_image_provenance` resolves the runtime libraries of the engine
binaries inside the image itself, so the digests are those the trials actually loaded.
"""

import contextlib
import getpass
import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.core import atomic
from appliance.core.digests import canonical_json, sha256_bytes
from appliance.core.errors import ApplianceError
from appliance.core.strict_load import load_json, load_yaml
from appliance.engine.lock import lock_digest
from appliance.engine.tools import IMAGE_TOOL_PATHS
from appliance.host.cgroups import cgroup_version
from appliance.host.containers import Kind, run_to_exit
from appliance.host.gpu import visible_gpus
from appliance.host.meminfo import meminfo_bytes
from appliance.images import labels as L
from appliance.runs.records import RunRecord
from appliance.runs.run_dir import (
    LOCK_INPUT,
    MODEL_INPUT,
    PROFILE_INPUT,
    SCHEDULE_INPUT,
    RunDir,
)

PROVENANCE_VERSION = 1
HOME_PLACEHOLDER = "<home>"
USER_PLACEHOLDER = "<user>"
HOST_PLACEHOLDER = "<host>"

# Prints "bin <sha256> <path>" per binary and "lib <sha256> <soname> <resolved path>" per
# shared library ldd resolves; "missing <soname>" when ldd cannot find one.
_IMAGE_PROBE = r"""
set -eu
command -v ldd >/dev/null || { echo "noldd"; exit 0; }
lib() { real=$(readlink -f "$2"); echo "lib $(sha256sum "$real" | cut -d' ' -f1) $1 $real"; }
for bin in "$@"; do
  if [ ! -f "$bin" ]; then echo "absent $bin"; continue; fi
  echo "bin $(sha256sum "$bin" | cut -d' ' -f1) $bin"
  ldd "$bin" 2>/dev/null | while read -r name arrow path rest; do
    case "$arrow" in
      "=>")
        if [ "$path" = "not" ]; then echo "missing $name"; else lib "$name" "$path"; fi ;;
      *)
        case "$name" in /*) lib "$name" "$name" ;; esac ;;
    esac
  done
done
"""


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cpu_model() -> str:
    cpuinfo = _read_text(Path("/proc/cpuinfo")) or ""
    match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    return match.group(1).strip() if match else platform.processor() or platform.machine()


def host_facts(docker_client: Any = None) -> dict[str, Any]:
    """Kernel, cgroup version, CPU, RAM, swap, Docker and GPUs of this machine (no names)."""
    facts: dict[str, Any] = {
        "os": platform.system(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cgroup_version": cgroup_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_bytes": meminfo_bytes("MemTotal"),
        "swap_bytes": meminfo_bytes("SwapTotal"),
        "docker_version": None,
        "gpus": [gpu.record() for gpu in visible_gpus()],
    }
    if docker_client is not None:
        facts["docker_version"] = docker_client.version().get("Version")
    return facts


def _parse_probe(output: str, binaries: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    current: dict[str, Any] | None = None
    for line in output.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "bin":
            digest, path = rest.split(" ", 1)
            current = {"sha256": digest, "libraries": {}, "missing_libraries": []}
            result[path] = current
        elif kind == "lib" and current is not None:
            digest, name, real = rest.split(" ", 2)
            current["libraries"][name] = {"path": real, "sha256": digest}
        elif kind == "missing" and current is not None:
            current["missing_libraries"].append(rest)
        elif kind == "noldd":
            raise ApplianceError(
                "the image has no ldd (libc-bin): its runtime libraries "
                "cannot be resolved; build it from the project's Dockerfile"
            )
    for binary in binaries:  # recorded, not raised: the bundle of a failed run still gets sealed
        result.setdefault(binary, {"absent": True})
    return result


def probe_spec(image_id: str, binaries: list[str], device_requests: list[Any] | None) -> dict[str, Any]:
    """The provenance probe kind's configure hook (host.containers): the probe script as root
    (so that every binary and library is readable), the image's entrypoint bypassed, the trials'
    GPU requests."""
    return {
        "image": image_id,
        "command": ["sh", "-c", _IMAGE_PROBE, "probe", *binaries],
        "entrypoint": [],
        "detach": True,
        "user": "0",
        "device_requests": device_requests,
    }


def collect_image_provenance(
    docker_client: Any, image: str, binaries: list[str], device_requests: list[Any] | None = None
) -> dict[str, Any]:
    """Image id, repo digests, labels; sha256 of each binary and each library it loads.

    The libraries are resolved by `ldd` inside a throwaway container of the image itself (the
    host.containers hardening: network off, no capabilities, read-only), so host libraries never
    stand in for the image's. Pass the trials' GPU device_requests so that driver libraries the
    NVIDIA runtime injects (libcuda) resolve as they did for the trials; without them they are
    listed as missing.
    """
    import docker.errors

    try:
        img = docker_client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ApplianceError(f"image {image} not found: build it with `appliance image build`") from None
    try:
        probe = run_to_exit(docker_client, Kind.PROBE, probe_spec(img.id, binaries, device_requests))
    except docker.errors.APIError as exc:
        raise ApplianceError(
            f"could not start a container of {image} to hash its binaries: {exc.explanation or exc}"
        ) from None
    if probe.status != 0:
        raise ApplianceError(f"probing {image} failed: {probe.stderr!r}")
    output = probe.output.decode()
    labels = img.labels or {}
    return {
        "reference": image,
        "id": img.id,
        "repo_digests": sorted(img.attrs.get("RepoDigests") or []),
        "labels": L.recorded_labels(labels),
        "binaries": _parse_probe(output, binaries),
    }


def _load_json(path: Path) -> Any:
    return load_json(path, missing=f"missing from the run directory {path.parent.name}")


def _run_record(layout: RunDir) -> RunRecord:
    """run.json, read strictly through its record."""
    return RunRecord.from_json(_load_json(layout.run_file), str(layout.run_file))


def source_identity(run: RunRecord | None, labels: dict[str, str]) -> str | None:
    """ "canonical" or "stand-in NAME": run.json's stand_in (null: canonical), else the labels."""
    if run is not None and run.records_source:
        return "canonical" if run.stand_in is None else f"stand-in {run.stand_in}"
    kind = labels.get(L.SOURCE_KIND)
    if kind is None:
        return None
    name = labels.get(L.SOURCE_NAME)
    return f"{kind} {name}" if kind != "canonical" and name else kind


def engine_facts(
    lock_raw: dict[str, Any], image: dict[str, Any] | None, run: RunRecord | None
) -> dict[str, Any]:
    """Lock digest, upstream pin, source, patch digests and the active series digest."""
    patches = lock_raw.get("patches", {})
    active = patches.get("active", [])
    labels = (image or {}).get("labels", {})
    return {
        "lock_sha256": lock_digest(lock_raw),
        "image_lock_digest": labels.get(L.LOCK_DIGEST),
        "upstream": lock_raw.get("upstream"),
        "source": source_identity(run, labels),
        "patches": {
            status: [{"file": p["file"], "sha256": p["sha256"]} for p in items]
            for status, items in patches.items()
        },
        "series_sha256": sha256_bytes(canonical_json([p["sha256"] for p in active])),
        "image_series_digest": labels.get(L.SERIES_DIGEST),
    }


def collect_provenance(
    run_dir: Path, host: dict[str, Any], image: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The provenance record of a run directory, from its inputs, run.json, host and image."""
    layout = RunDir(run_dir)
    run = _run_record(layout)
    lock_raw = _load_json(layout.input(LOCK_INPUT))
    profile = load_yaml(
        layout.input(PROFILE_INPUT), missing=f"missing from {run_dir.name}/{layout.inputs.name}"
    )
    record = {
        "provenance_version": PROVENANCE_VERSION,
        "appliance_version": __version__,
        "run": run.provenance(),
        "engine": engine_facts(lock_raw, image, run),
        "image": image,
        "model": _load_json(layout.input(MODEL_INPUT)),
        "schedule": _load_json(layout.input(SCHEDULE_INPUT)),
        "profile": {"name": profile.get("name") if isinstance(profile, dict) else None},
        "host": host,
    }
    return sanitize(record)


def collect_run_provenance(
    run_dir: Path, docker_client: Any = None, binaries: tuple[str, ...] = IMAGE_TOOL_PATHS
) -> dict[str, Any]:
    """collect_provenance with this host's facts and, given a Docker client, the image the
    run used (run.json image_id), its binaries and libraries resolved inside it."""
    run = _run_record(RunDir(run_dir))
    image = None
    if docker_client is not None and run.image_id:
        requests = None
        if run.target not in (None, "cpu"):
            import docker.types

            requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        image = collect_image_provenance(docker_client, run.image_id, list(binaries), requests)
    return collect_provenance(run_dir, host_facts(docker_client), image)


def write_provenance(run_dir: Path, provenance: dict[str, Any]) -> Path:
    path = RunDir(run_dir).provenance_file
    atomic.write_json(path, provenance)
    return path


def _identifiers() -> list[tuple[str, str]]:
    """(host-identifying text, placeholder), longest first so a home path wins over the user."""
    pairs = [(str(Path.home()), HOME_PLACEHOLDER)]
    with contextlib.suppress(KeyError, OSError):
        pairs.append((getpass.getuser(), USER_PLACEHOLDER))
    pairs.append((socket.gethostname(), HOST_PLACEHOLDER))
    usable = [(text, ph) for text, ph in pairs if len(text) >= 3 and text not in ("/", "root")]
    return sorted(usable, key=lambda pair: -len(pair[0]))


def sanitize(value: Any, identifiers: list[tuple[str, str]] | None = None) -> Any:
    """value with the home directory, user name and host name replaced by placeholders."""
    pairs = _identifiers() if identifiers is None else identifiers
    if isinstance(value, str):
        for text, placeholder in pairs:
            # whole words only: a user "ann" must not turn "channel" into "ch<user>el"
            value = re.sub(rf"(?<![\w.-]){re.escape(text)}(?![\w-])", placeholder, value)
        return value
    if isinstance(value, dict):
        return {sanitize(k, pairs): sanitize(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v, pairs) for v in value]
    return value
