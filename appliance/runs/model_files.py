"""Model files: found by name in the models directory, checked by size and then by sha256.

Hashing a 17 GB file takes minutes, so digests are cached under APPLIANCE_CACHE keyed by the
file's real path, size, mtime and inode: a second run of an unchanged file hashes nothing.
The models directory is only ever read.
"""

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core import atomic
from appliance.core.digests import sha256_bytes, sha256_file
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.paths import cache_dir, repo_root
from appliance.core.progress import ProgressFn, byte_counter
from appliance.core.strict_load import load_json
from appliance.core.units import format_size
from appliance.runs.profile import ModelManifest, RoutesManifest

if TYPE_CHECKING:
    from appliance.trace.format import Trace

# How a model's digest was established, recorded in inputs/model.json.
VERIFIED = "verified"  # sha256 computed (or cached) and equal to the pinned one
UNPINNED = "unpinned"  # the profile pins no sha256: the computed one is recorded
SKIPPED = "skipped"  # --skip-digest-check: nothing hashed, size checked only
SKELETON = "skeleton"  # --skeleton (dry runs): a header-only file stands for the model, unchecked


@dataclass(frozen=True)
class CheckedModel:
    path: Path
    file: str
    bytes: int
    sha256: str | None
    digest_status: str
    digest_from_cache: bool

    def manifest(self) -> dict[str, object]:
        """inputs/model.json: what was checked, without the host path."""
        record = asdict(self)
        record.pop("path")
        return record


def digest_cache_path() -> Path:
    return cache_dir() / "model-digests.json"


def _cache_key(path: Path, stat: os.stat_result) -> str:
    return f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"


def _load_cache() -> dict[str, str]:
    try:
        data = load_json(digest_cache_path())
    except ConfigError:  # missing or damaged: digests are computed again
        return {}
    return data if isinstance(data, dict) else {}


def cached_sha256(path: Path, progress: ProgressFn | None = None) -> tuple[str, bool]:
    """(sha256, came from cache) for a file, hashing only when size/mtime/inode changed;
    `progress` gets the bytes hashed."""
    real = path.resolve()
    stat = real.stat()
    key = _cache_key(real, stat)
    cache = _load_cache()
    if key in cache:
        return cache[key], True
    digest = sha256_file(real, byte_counter(f"sha256 {real.name}", stat.st_size, progress))
    # Drop this file's stale entries and those of files that no longer exist.
    cache = {
        k: v
        for k, v in _load_cache().items()
        if not k.startswith(f"{real}|") and Path(k.split("|", 1)[0]).exists()
    }
    cache[key] = digest
    atomic.write_json(digest_cache_path(), cache)
    return digest, False


def missing_model_message(manifest: ModelManifest, models_dir: Path) -> str:
    size = f"{manifest.bytes:,} bytes" if manifest.bytes is not None else "size not pinned"
    digest = f"sha256 {manifest.sha256}" if manifest.sha256 else "sha256 not pinned"
    where = f"get it from: {manifest.source}"
    if manifest.synth:
        where = (
            "create it with: appliance model synth "
            f"{models_dir / manifest.file} {' '.join(manifest.synth_args())}"
        )
    return f"model {manifest.file} not found in {models_dir} (expected {size}, {digest}); {where}"


def locate_model(manifest: ModelManifest, models_dir: Path, skeleton: bool = False) -> tuple[Path, int]:
    """The model's path and size; refuses a missing file or one of the wrong size (unless it is
    a skeleton standing for the model in a dry run)."""
    if not models_dir.is_dir():
        raise ApplianceError(f"models directory {models_dir} does not exist: pass --models DIR")
    path = models_dir / manifest.file
    if not path.is_file():
        raise ApplianceError(missing_model_message(manifest, models_dir))
    size = path.stat().st_size
    if manifest.bytes is not None and size != manifest.bytes and not skeleton:
        raise IntegrityError(
            f"model {path} has {size:,} bytes, the profile pins "
            f"{manifest.bytes:,} ({format_size(manifest.bytes, trim=True)}): wrong or "
            f"incomplete file; get it from: {manifest.source}"
        )
    return path, size


def routes_path(file: str, models_dir: Path, variant: str) -> Path:
    """The path of a variant's routes file (`routes:`), which lives beside the model; refuses a
    missing one."""
    path = models_dir / file
    if not path.is_file():
        raise ApplianceError(
            f"routes file {file} of variant {variant} not found in {models_dir}; make it from a "
            f"route trace with: appliance trace routes TRACE --out {path}"
        )
    return path


def routes_commands(manifest: RoutesManifest, path: Path) -> str:
    """The commands that make the profile's routes file by hand."""
    trace = path.with_suffix(".moetrace")
    layers = "" if manifest.layers is None else f" --layers {manifest.layers}"
    synth = manifest.synth
    if synth is None:
        make = f"appliance trace import {manifest.source} --from route-trace-csv --out {trace}"
    else:
        knobs = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in synth.knobs)
        make = (
            f"appliance trace synth {trace} {knobs or '--calibrated'} --layers {synth.layers} "
            f"--experts {synth.experts} --k {synth.k} --prompt {synth.prompt} --decode {synth.decode} "
            f"--seed {synth.seed}"
        )
    return f"{make} && appliance trace routes {trace}{layers} --out {path}"


def check_routes(manifest: RoutesManifest, models_dir: Path) -> Path:
    """The profile's routes file in models_dir; refuses a missing one (naming the commands that
    make it) or one whose sha256 is not the pinned one."""
    path = models_dir / manifest.file
    if not path.is_file():
        raise ApplianceError(
            f"routes file {manifest.file} not found in {models_dir}; make it with: "
            + routes_commands(manifest, path)
        )
    digest = sha256_file(path)
    if digest != manifest.sha256:
        raise IntegrityError(
            f"routes file {path} has sha256 {digest}, the profile pins {manifest.sha256}; "
            f"delete it to remake it from {manifest.origin}"
        )
    return path


def routes_trace(manifest: RoutesManifest) -> "Trace":
    """The trace the profile's routes are made from: its route trace in the checkout, or its
    synthetic trace (made in memory, the same every time)."""
    from appliance.trace.interchange import import_trace
    from appliance.trace.synth import TraceSynthSpec, calibrated_knobs, synth_trace

    synth = manifest.synth
    if synth is not None:
        knobs: dict[str, Any] = (
            dict(synth.knobs) if synth.knobs else calibrated_knobs(synth.layers, synth.experts, synth.k)
        )
        spec = TraceSynthSpec(
            n_layers=synth.layers,
            n_experts=synth.experts,
            k=synth.k,
            n_prompt=synth.prompt,
            n_decode=synth.decode,
            seed=synth.seed,
            **knobs,
        )
        return synth_trace(spec)
    assert manifest.source is not None  # the profile has exactly one of from and synth
    source = repo_root() / manifest.source
    if not source.is_file():
        raise ConfigError(
            f"routes file {manifest.file} is made from {manifest.source}, which is not in "
            f"{repo_root()}: run from a checkout of the project"
        )
    return import_trace(source, "route-trace-csv", None)


def make_routes(manifest: RoutesManifest, models_dir: Path) -> Path | None:
    """Write the profile's routes file into models_dir from its route trace in the checkout or
    its calibrated synthetic trace, unless it is there (None then); refuses routes whose sha256
    is not the pinned one, before a byte is written."""
    from appliance.trace.routes import routes_bytes

    path = models_dir / manifest.file
    if path.exists():
        return None
    data = routes_bytes(routes_trace(manifest), manifest.origin, manifest.layers)
    digest = sha256_bytes(data)
    if digest != manifest.sha256:
        raise IntegrityError(
            f"routes made from {manifest.origin} have sha256 {digest}, the profile pins "
            f"{manifest.sha256}: the trace, its synth or the routes format changed; nothing written"
        )
    atomic.write_bytes(path, data)
    return path


def routes_record(file: str, models_dir: Path, variant: str) -> dict[str, str]:
    """trial.json `routes`: the routes file the engine was given and its sha256."""
    return {"file": file, "sha256": sha256_file(routes_path(file, models_dir, variant))}


def check_model(
    manifest: ModelManifest,
    models_dir: Path,
    skip_digest: bool = False,
    progress: ProgressFn | None = None,
    located: tuple[Path, int] | None = None,
    skeleton: bool = False,
) -> CheckedModel:
    """Size first (cheap), then sha256 unless skipped; refuses a missing or different file.
    `located` is `locate_model`'s answer when the caller has it already (then not asked again)."""
    path, size = located if located is not None else locate_model(manifest, models_dir, skeleton)
    if skeleton:
        return CheckedModel(path, manifest.file, size, None, SKELETON, False)
    if skip_digest:
        return CheckedModel(path, manifest.file, size, None, SKIPPED, False)
    digest, from_cache = cached_sha256(path, progress)
    if manifest.sha256 is None:
        return CheckedModel(path, manifest.file, size, digest, UNPINNED, from_cache)
    if digest != manifest.sha256:
        raise IntegrityError(
            f"model {path} has sha256 {digest}, the profile pins "
            f"{manifest.sha256}: refusing to run a different file"
        )
    return CheckedModel(path, manifest.file, size, digest, VERIFIED, from_cache)
