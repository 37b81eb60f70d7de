"""The engine lock: the pinned llama.cpp source, its stand-ins, the patch series and targets.

`engine/llama.cpp.lock.json` is the source of truth. This module reads it strictly
(appliance.core.strict_load), validates it against `appliance/schemas/lock.schema.json`
(one-line errors naming the file and the field's JSON pointer), builds the records below from
the validated data and computes its canonical digest, which identifies an engine build.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core import atomic
from appliance.core.digests import canonical_json, sha256_bytes
from appliance.core.errors import ConfigError
from appliance.core.paths import default_lock_path
from appliance.core.records import Record
from appliance.core.strict_load import load_json
from appliance.core.validation import validate

MAX_LOCK_BYTES = 256 << 10  # the lock is about 3 KiB
PATCH_STATUSES = ("active", "experimental", "rejected")


@dataclass(frozen=True)
class Upstream(Record):
    name: str
    repository: str
    commit: str
    release: str


@dataclass(frozen=True)
class StandIn(Record):
    name: str
    package: str
    version: str
    release: str
    relation: str
    sdist_sha256: str
    tree: str


CANONICAL_TRACK = "canonical"  # the pin and the stand-ins that bracket it
CURRENT_TRACK_RELATION = "current-track"


@dataclass(frozen=True)
class Track:
    """A newer llama.cpp than the pin: one stand-in, the same series, and a variant file for each
    patch whose upstream context differs there (patch file name -> the variant's sha256)."""

    name: str
    release: str
    stand_in: str
    variants: dict[str, str]


@dataclass(frozen=True)
class PatchEntry(Record):
    file: str
    sha256: str
    status: str


@dataclass(frozen=True)
class Wheel(Record):
    """One PyPI wheel of a CUDA toolkit, pinned by file name and sha256."""

    package: str
    version: str
    file: str
    sha256: str
    parts: tuple[str, ...]

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class CudaToolkit(Record):
    """Where a GPU target's bases come from: `pypi-wheels` (registry-free bases that
    `appliance image base` makes from `wheels`) or `nvidia-cuda` (images pinned by digest)."""

    version: str
    kind: str
    min_driver: str
    build_base: str
    runtime_base: str
    wheels: tuple[Wheel, ...]

    def wheels_for(self, part: str) -> tuple[Wheel, ...]:
        return tuple(w for w in self.wheels if part in w.parts)


@dataclass(frozen=True)
class CudaSpec:
    version: str
    architectures: str
    min_driver: str
    compute_capability: str
    base_kind: str

    @property
    def sass(self) -> tuple[str, ...]:
        """Architectures compiled to machine code (`-real`), e.g. ("89",)."""
        return tuple(a.removesuffix("-real") for a in self.architectures.split(";") if a.endswith("-real"))

    @property
    def ptx(self) -> tuple[str, ...]:
        """Virtual architectures embedded as PTX (`-virtual`), e.g. ("90",)."""
        return tuple(
            a.removesuffix("-virtual") for a in self.architectures.split(";") if a.endswith("-virtual")
        )


@dataclass(frozen=True)
class Target:
    name: str
    build_base: str
    runtime_base: str
    base_digest: str | None
    build_base_digest: str | None
    cmake_args: tuple[str, ...]
    cuda: CudaSpec | None


@dataclass(frozen=True)
class Lock:
    path: Path
    raw: dict[str, Any]
    upstream: Upstream
    stand_ins: dict[str, StandIn]
    patches: dict[str, tuple[PatchEntry, ...]]
    targets: dict[str, Target]
    cuda_toolkits: dict[str, CudaToolkit] = field(default_factory=dict)
    published_images: dict[str, Any] = field(default_factory=dict)
    release_keys: dict[str, Any] = field(default_factory=dict)
    tracks: dict[str, Track] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return lock_digest(self.raw)

    @property
    def active_patches(self) -> tuple[PatchEntry, ...]:
        return self.patches["active"]

    def target(self, name: str) -> Target:
        if name not in self.targets:
            known = ", ".join(sorted(self.targets))
            raise ConfigError(f"unknown target {name!r}: the lock names {known}")
        return self.targets[name]

    def cuda_toolkit(self, version: str) -> CudaToolkit:
        if version not in self.cuda_toolkits:
            known = ", ".join(sorted(self.cuda_toolkits)) or "none"
            raise ConfigError(
                f"CUDA {version} is not in the lock (cuda_toolkits names {known}): pass one of those"
            )
        return self.cuda_toolkits[version]

    def target_on(self, name: str, cuda_version: str | None = None) -> Target:
        """A target built on another CUDA toolkit of the lock (None: its own)."""
        target = self.target(name)
        if cuda_version is None:
            return target
        if target.cuda is None:
            raise ConfigError(f"target {name} is not a CUDA target: --cuda applies to GPU targets only")
        return _gpu_target(name, self.raw["targets"][name], self.cuda_toolkit(cuda_version))

    @property
    def bracket_stand_ins(self) -> dict[str, StandIn]:
        """The stand-ins on either side of the canonical pin (not a newer track's source)."""
        return {n: s for n, s in self.stand_ins.items() if s.relation != CURRENT_TRACK_RELATION}

    def track_of_source(self, name: str | None) -> str:
        """The track a source belongs to: a track's stand-in names that track, anything else is
        the canonical track's."""
        return next((t.name for t in self.tracks.values() if t.stand_in == name), CANONICAL_TRACK)

    def track(self, name: str) -> Track | None:
        """A named track (None for the canonical one); an unknown name is refused."""
        if name == CANONICAL_TRACK:
            return None
        if name not in self.tracks:
            known = ", ".join([CANONICAL_TRACK, *sorted(self.tracks)])
            raise ConfigError(f"unknown track {name!r}: the lock names {known}")
        return self.tracks[name]

    def stand_in(self, name: str) -> StandIn:
        if name not in self.stand_ins:
            known = ", ".join(sorted(self.stand_ins))
            raise ConfigError(f"unknown stand-in {name!r}: the lock names {known}")
        return self.stand_ins[name]


NOT_IDENTITY = ("published_images", "release_keys")


def lock_digest(raw: dict[str, Any]) -> str:
    """sha256 of the lock's canonical JSON form (sorted keys, no whitespace), leaving out
    NOT_IDENTITY: publishing an image built from this lock, or pinning the key that signs its
    record, must not change the identity of what is built."""
    return sha256_bytes(canonical_json({k: v for k, v in raw.items() if k not in NOT_IDENTITY}))


def _toolkit(version: str, raw: dict[str, Any], path: Path) -> CudaToolkit:
    if (raw["kind"] == "pypi-wheels") != bool(raw.get("wheels")):
        need = "needs" if raw["kind"] == "pypi-wheels" else "takes no"
        raise ConfigError(f"{path}: /cuda_toolkits/{version}: kind {raw['kind']} {need} wheels")
    return CudaToolkit.from_json(
        {"wheels": [], **raw, "version": version}, f"{path}: /cuda_toolkits/{version}"
    )


def _gpu_target(name: str, raw: dict[str, Any], toolkit: CudaToolkit) -> Target:
    """A GPU target: bases, CUDA version and driver floor from its toolkit."""
    cuda = raw["cuda"]
    return Target(
        name=name,
        build_base=toolkit.build_base,
        runtime_base=toolkit.runtime_base,
        base_digest=None,
        build_base_digest=None,
        cmake_args=tuple(raw["cmake_args"]),
        cuda=CudaSpec(
            version=toolkit.version,
            architectures=cuda["architectures"],
            min_driver=toolkit.min_driver,
            compute_capability=cuda["compute_capability"],
            base_kind=toolkit.kind,
        ),
    )


def _target(name: str, raw: dict[str, Any], toolkits: dict[str, CudaToolkit], path: Path) -> Target:
    cuda = raw.get("cuda")
    if cuda is not None:
        if cuda["version"] not in toolkits:
            known = ", ".join(sorted(toolkits)) or "none"
            raise ConfigError(
                f"{path}: /targets/{name}/cuda/version: CUDA {cuda['version']} is not in cuda_toolkits "
                f"(it names {known}): add it there or name one of those"
            )
        if {"build_base", "runtime_base", "base_digest", "build_base_digest"} & set(raw):
            raise ConfigError(
                f"{path}: /targets/{name}: a GPU target's bases come from cuda_toolkits/{cuda['version']}: "
                "remove build_base, runtime_base and their digests from the target"
            )
        return _gpu_target(name, raw, toolkits[cuda["version"]])
    for key in ("build_base", "runtime_base"):
        if key not in raw:
            raise ConfigError(f"{path}: /targets/{name}/{key}: missing field (a CPU target names its bases)")
    return Target(
        name=name,
        build_base=raw["build_base"],
        runtime_base=raw["runtime_base"],
        base_digest=raw.get("base_digest"),
        build_base_digest=raw.get("build_base_digest"),
        cmake_args=tuple(raw["cmake_args"]),
        cuda=None,
    )


def parse_lock(raw: Any, path: Path) -> Lock:
    """The lock from its JSON data, validated against appliance/schemas/lock.schema.json."""
    validate(raw, "lock", path)
    toolkits = {
        version: _toolkit(version, item, path) for version, item in (raw.get("cuda_toolkits") or {}).items()
    }
    return Lock(
        path=path,
        raw=raw,
        upstream=Upstream.from_json(raw["upstream"], f"{path}: /upstream"),
        stand_ins={
            name: StandIn.from_json({**item, "name": name}, f"{path}: /stand_ins/{name}")
            for name, item in raw["stand_ins"].items()
        },
        patches={
            status: tuple(
                PatchEntry.from_json({**p, "status": status}, f"{path}: /patches/{status}")
                for p in raw["patches"][status]
            )
            for status in PATCH_STATUSES
        },
        targets={name: _target(name, item, toolkits, path) for name, item in raw["targets"].items()},
        cuda_toolkits=toolkits,
        published_images=raw.get("published_images") or {},
        release_keys=raw.get("release_keys") or {},
        tracks=_tracks(raw, path),
    )


def _tracks(raw: dict[str, Any], path: Path) -> dict[str, Track]:
    tracks = {}
    for name, item in (raw.get("tracks") or {}).items():
        stand_in = raw["stand_ins"].get(item["stand_in"])
        if name == CANONICAL_TRACK or stand_in is None or stand_in["relation"] != CURRENT_TRACK_RELATION:
            raise ConfigError(
                f"{path}: /tracks/{name}: a track is named other than {CANONICAL_TRACK!r} and built "
                f"from a stand-in of relation {CURRENT_TRACK_RELATION} ({item['stand_in']!r} is not one)"
            )
        variants = {v["file"]: v["sha256"] for v in item["variants"]}
        tracks[name] = Track(name, item["release"], item["stand_in"], variants)
    return tracks


def load_lock(path: Path | None = None) -> Lock:
    path = path or default_lock_path()
    raw = load_json(
        path, MAX_LOCK_BYTES, missing="lock file not found (pass --lock or run from the project checkout)"
    )
    return parse_lock(raw, path)


def write_lock(lock_raw: dict[str, Any], path: Path) -> None:
    """Rewrite the lock file (pretty, stable key order) after validating it."""
    parse_lock(lock_raw, path)
    atomic.write_json(path, lock_raw, sort_keys=False)
