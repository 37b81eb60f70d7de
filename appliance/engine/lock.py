"""The engine lock: the pinned llama.cpp source, its stand-ins, the patch series and targets.

`engine/llama.cpp.lock.json` is the source of truth. This module loads it, validates every
field it relies on (one-line errors naming the file and field) and computes its canonical
digest, which identifies an engine build.
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.digests import canonical_json, sha256_bytes
from appliance.core.errors import ConfigError
from appliance.core.nesting import MAX_NESTING, max_nesting
from appliance.core.paths import default_lock_path

SCHEMA_VERSION = 1
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
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


class _Fields:
    """Typed access to one JSON object, raising one-line errors that name file and field."""

    def __init__(self, path: Path, where: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {where or 'top level'}: expected an object")
        self.path, self.where, self.value = path, where, value

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self._name(key)}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
        if key not in self.value:
            if optional:
                return None
            raise self.fail(key, "missing field")
        item = self.value[key]
        if item is None and optional:
            return None
        if not isinstance(item, kind) or isinstance(item, bool) and kind is not bool:
            raise self.fail(key, f"expected {getattr(kind, '__name__', kind)}, got {type(item).__name__}")
        return item

    def text(self, key: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        item: str = self.get(key, str)
        if pattern is not None and not pattern.match(item):
            raise self.fail(key, f"{item!r} is not {what or 'well formed'}")
        return item

    def child(self, key: str, optional: bool = False) -> "_Fields":
        item = self.get(key, dict, optional=optional)
        return _Fields(self.path, self._name(key), item if item is not None else {})


def _parse_upstream(f: _Fields) -> Upstream:
    return Upstream(
        name=f.text("name"),
        repository=f.text("repository"),
        commit=f.text("commit", COMMIT_RE, "a 40-hex-digit git commit"),
        release=f.text("release"),
    )


def _parse_stand_in(name: str, f: _Fields) -> StandIn:
    if not NAME_RE.match(name):
        raise ConfigError(f"{f.path}: {f.where}: {name!r} is not a valid stand-in name")
    return StandIn(
        name=name,
        package=f.text("package"),
        version=f.text("version"),
        release=f.text("release"),
        relation=f.text("relation"),
        sdist_sha256=f.text("sdist_sha256", SHA256_RE, "a lowercase 64-hex-digit sha256"),
        tree=f.text("tree"),
    )


def _parse_patches(f: _Fields) -> dict[str, tuple[PatchEntry, ...]]:
    out: dict[str, tuple[PatchEntry, ...]] = {}
    for status in PATCH_STATUSES:
        items = f.get(status, list)
        entries = []
        for index, item in enumerate(items):
            pf = _Fields(f.path, f"{f.where}.{status}[{index}]", item)
            entries.append(
                PatchEntry(
                    file=pf.text("file"),
                    sha256=pf.text("sha256", SHA256_RE, "a lowercase 64-hex-digit sha256"),
                    status=status,
                )
            )
        out[status] = tuple(entries)
    return out


def _parse_target(name: str, f: _Fields) -> Target:
    cuda_raw = f.get("cuda", dict, optional=True)
    cuda = None
    if cuda_raw is not None:
        cf = _Fields(f.path, f"{f.where}.cuda", cuda_raw)
        cuda = CudaSpec(
            version=cf.text("version"),
            architectures=cf.text("architectures"),
            min_driver=cf.text("min_driver"),
            compute_capability=cf.text("compute_capability"),
        )
    args = f.get("cmake_args", list)
    if not all(isinstance(a, str) for a in args):
        raise f.fail("cmake_args", "expected a list of strings")
    digest = f.get("base_digest", str, optional=True)
    if digest is not None and not re.match(r"^sha256:[0-9a-f]{64}$", digest):
        raise f.fail("base_digest", f"{digest!r} is not of the form sha256:<64 hex digits>")
    return Target(
        name=name,
        build_base=f.text("build_base"),
        runtime_base=f.text("runtime_base"),
        base_digest=digest,
        cmake_args=tuple(args),
        cuda=cuda,
    )


def parse_lock(raw: Any, path: Path) -> Lock:
    top = _Fields(path, "", raw)
    version = top.get("schema_version", int)
    if version != SCHEMA_VERSION:
        raise top.fail("schema_version", f"unsupported version {version} (this tool reads {SCHEMA_VERSION})")
    stand_ins_f = top.child("stand_ins")
    targets_f = top.child("targets")
    return Lock(
        path=path,
        raw=raw,
        upstream=_parse_upstream(top.child("upstream")),
        stand_ins={
            name: _parse_stand_in(name, stand_ins_f.child(name)) for name in stand_ins_f.value
        },
        patches=_parse_patches(top.child("patches")),
        targets={name: _parse_target(name, targets_f.child(name)) for name in targets_f.value},
        published_images=top.get("published_images", dict, optional=True) or {},
    )


def load_lock(path: Path | None = None) -> Lock:
    path = path or default_lock_path()
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: lock file not found (pass --lock or run from the project checkout)"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start} is invalid)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the lock ({exc.strerror})") from None
    if max_nesting(text) > MAX_NESTING:
        raise ConfigError(f"{path}: nests deeper than {MAX_NESTING} levels; not a lock")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:  # e.g. an integer too long to convert
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    return parse_lock(raw, path)


def write_lock(lock_raw: dict[str, Any], path: Path) -> None:
    """Rewrite the lock file (pretty, stable key order) after validating it."""
    parse_lock(lock_raw, path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(lock_raw, indent=2) + "\n")
    tmp.replace(path)
