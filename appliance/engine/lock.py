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
from appliance.core.strict_load import load_json
from appliance.core.validation import validate

MAX_LOCK_BYTES = 256 << 10  # the lock is about 3 KiB
PATCH_STATUSES = ("active", "experimental", "rejected")


@dataclass(frozen=True)
class Upstream:
    name: str
    repository: str
    commit: str
    release: str


@dataclass(frozen=True)
class StandIn:
    name: str
    package: str
    version: str
    release: str
    relation: str
    sdist_sha256: str
    tree: str


@dataclass(frozen=True)
class PatchEntry:
    file: str
    sha256: str
    status: str


@dataclass(frozen=True)
class CudaSpec:
    version: str
    architectures: str
    min_driver: str
    compute_capability: str


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
    published_images: dict[str, Any] = field(default_factory=dict)

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

    def stand_in(self, name: str) -> StandIn:
        if name not in self.stand_ins:
            known = ", ".join(sorted(self.stand_ins))
            raise ConfigError(f"unknown stand-in {name!r}: the lock names {known}")
        return self.stand_ins[name]


def lock_digest(raw: dict[str, Any]) -> str:
    """sha256 of the lock's canonical JSON form (sorted keys, no whitespace), leaving out
    `published_images`: publishing an image built from this lock must not change its identity."""
    return sha256_bytes(canonical_json({k: v for k, v in raw.items() if k != "published_images"}))


def _upstream(raw: dict[str, Any]) -> Upstream:
    return Upstream(
        name=raw["name"], repository=raw["repository"], commit=raw["commit"], release=raw["release"]
    )


def _stand_in(name: str, raw: dict[str, Any]) -> StandIn:
    return StandIn(
        name=name,
        package=raw["package"],
        version=raw["version"],
        release=raw["release"],
        relation=raw["relation"],
        sdist_sha256=raw["sdist_sha256"],
        tree=raw["tree"],
    )


def _target(name: str, raw: dict[str, Any]) -> Target:
    cuda = raw.get("cuda")
    return Target(
        name=name,
        build_base=raw["build_base"],
        runtime_base=raw["runtime_base"],
        base_digest=raw.get("base_digest"),
        build_base_digest=raw.get("build_base_digest"),
        cmake_args=tuple(raw["cmake_args"]),
        cuda=CudaSpec(**cuda) if cuda is not None else None,
    )


def parse_lock(raw: Any, path: Path) -> Lock:
    """The lock from its JSON data, validated against appliance/schemas/lock.schema.json."""
    validate(raw, "lock", path)
    return Lock(
        path=path,
        raw=raw,
        upstream=_upstream(raw["upstream"]),
        stand_ins={name: _stand_in(name, item) for name, item in raw["stand_ins"].items()},
        patches={
            status: tuple(
                PatchEntry(file=p["file"], sha256=p["sha256"], status=status) for p in raw["patches"][status]
            )
            for status in PATCH_STATUSES
        },
        targets={name: _target(name, item) for name, item in raw["targets"].items()},
        published_images=raw.get("published_images") or {},
    )


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
