"""Experiment profiles: YAML files naming a model, limits, variants and a schedule.

Built-in profiles live in `appliance/profiles/` as package data; a user's file is accepted by
path. Loading validates the whole document against a fixed schema: unknown keys, wrong types
and impossible limits are refused with one line naming the file and the field.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from appliance.core import units
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import PACKAGE_DIR
from appliance.runs.memory_points import MemoryPoint, parse_memory_point

SCHEMA_VERSION = 1
PROFILES_DIR = PACKAGE_DIR / "profiles"
TARGETS = ("auto", "cpu", "sm89", "sm120")
GPU_NEEDS = ("required", "optional", "none")
ORDERS = ("interleaved", "blocked")
DOCKER_MIN_MEMORY = 6 * 1024 * 1024
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelManifest:
    file: str
    bytes: int | None
    sha256: str | None
    source: str
    synth: dict[str, Any] | None

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None and self.bytes is not None

    def synth_args(self) -> list[str]:
        """`appliance model synth` options that recreate a synthesized model ([] if none):
        each key of model.synth becomes --key value."""
        args: list[str] = []
        for key, value in (self.synth or {}).items():
            args += [f"--{key}", str(value)]
        return args


@dataclass(frozen=True)
class Limits:
    memory: int
    swap: int
    engine_min_memory: int

    @property
    def memswap(self) -> int:
        """Docker's memswap_limit: memory plus swap (equal to memory when swap is 0)."""
        return self.memory + self.swap


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]
    args: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    repeats: int
    order: str
    n_predict: int
    prompt: str
    seed: int
    cold_cache: bool


@dataclass(frozen=True)
class SweepSpec:
    """The limits `appliance sweep` runs by default, and optionally more generated tokens
    (a sweep needs enough decode steps for capacity misses to outnumber first touches)."""

    memory: tuple[MemoryPoint, ...]
    n_predict: int | None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source_path: Path
    source_text: str
    model: ModelManifest
    target: str
    gpu: str
    limits: Limits
    engine_args: tuple[str, ...]
    variants: tuple[Variant, ...]
    schedule: Schedule
    trace: bool
    evidence: tuple[str, ...]
    sweep: "SweepSpec | None" = None  # `sweep: {memory: [...], n_predict: N}`

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise ConfigError(f"profile {self.name}: no variant {name!r}")


def parse_size(value: Any) -> int:
    """Bytes from an int or a string such as "8GiB", "200MiB", "0"; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a size like 8GiB, 512MiB or a byte count")
    try:
        return units.parse_size(value)
    except ApplianceError:
        raise ValueError(f"{value!r} is not a size like 8GiB, 512MiB or a byte count") from None


def format_size(count: int) -> str:
    """Binary units for people: 8589934592 -> "8 GiB", 209715200 -> "200 MiB"."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class _Section:
    """One mapping of the document: typed fields, unknown keys refused, errors name the path."""

    def __init__(self, path: Path, where: str, value: Any, allowed: tuple[str, ...]) -> None:
        self.path, self.where = path, where
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {where or 'top level'}: expected a mapping")
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ConfigError(f"{path}: {self._name(unknown[0])}: unknown key "
                              f"(allowed: {', '.join(allowed)})")
        self.value = value

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self._name(key)}: {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...,
            nullable: bool = False) -> Any:
        if key not in self.value:
            if default is ...:
                raise self.fail(key, "missing key")
            return default
        item = self.value[key]
        if item is None and nullable:
            return None
        bool_mismatch = isinstance(item, bool) and kind is not bool
        if not isinstance(item, kind) or bool_mismatch:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            name = " or ".join(k.__name__ for k in kinds)
            raise self.fail(key, f"expected {name}, got {type(item).__name__}")
        return item

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        item: str = self.get(key, str)
        if item not in choices:
            raise self.fail(key, f"{item!r} is not one of {', '.join(choices)}")
        return item

    def size(self, key: str, default: Any = ...) -> int:
        raw = self.get(key, (int, str), default=default)
        try:
            return parse_size(raw)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def section(self, key: str, allowed: tuple[str, ...]) -> "_Section":
        return _Section(self.path, self._name(key), self.get(key, dict), allowed)


def _strings(section: _Section, key: str) -> tuple[str, ...]:
    items = section.get(key, list, default=[])
    if not all(isinstance(item, str) for item in items):
        raise section.fail(key, "expected a list of strings")
    return tuple(items)


def _env(section: _Section, key: str) -> dict[str, str]:
    items = section.get(key, dict, default={})
    for name, value in items.items():
        if not isinstance(name, str) or not ENV_RE.match(name):
            raise section.fail(key, f"{name!r} is not an environment variable name")
        if not isinstance(value, str):
            raise section.fail(f"{key}.{name}", "values must be strings (quote them in YAML)")
    return dict(items)


def _model(top: _Section) -> ModelManifest:
    m = top.section("model", ("file", "bytes", "sha256", "source", "synth"))
    file = m.get("file", str)
    if "/" in file or file in ("", ".", ".."):
        raise m.fail("file", f"{file!r} must be a plain file name inside the models directory")
    size = m.get("bytes", int, nullable=True)
    if size is not None and size <= 0:
        raise m.fail("bytes", "must be positive")
    sha256 = m.get("sha256", str, nullable=True)
    if sha256 is not None and not SHA256_RE.match(sha256):
        raise m.fail("sha256", f"{sha256!r} is not a lowercase 64-hex-digit sha256")
    synth = m.get("synth", dict, default=None, nullable=True)
    return ModelManifest(file=file, bytes=size, sha256=sha256, source=m.get("source", str),
                         synth=synth)


def _variants(top: _Section) -> tuple[Variant, ...]:
    items = top.get("variants", list)
    if not items:
        raise top.fail("variants", "at least one variant is needed")
    variants: list[Variant] = []
    for index, item in enumerate(items):
        v = _Section(top.path, f"variants[{index}]", item, ("name", "env", "args"))
        name = v.get("name", str)
        if not NAME_RE.match(name):
            raise v.fail("name", f"{name!r}: use lowercase letters, digits, '.', '_' and '-'")
        if any(existing.name == name for existing in variants):
            raise v.fail("name", f"{name!r} appears twice")
        variants.append(Variant(name=name, env=_env(v, "env"), args=_strings(v, "args")))
    return tuple(variants)


def _schedule(top: _Section) -> Schedule:
    s = top.section("schedule", ("repeats", "order", "n_predict", "prompt", "seed", "cold_cache"))
    schedule = Schedule(repeats=s.get("repeats", int), order=s.choice("order", ORDERS),
                        n_predict=s.get("n_predict", int), prompt=s.get("prompt", str),
                        seed=s.get("seed", int), cold_cache=s.get("cold_cache", bool))
    if schedule.repeats < 1:
        raise s.fail("repeats", "must be at least 1")
    if schedule.n_predict < 1:
        raise s.fail("n_predict", "must be at least 1")
    return schedule


def _limits(top: _Section) -> Limits:
    lim = top.section("limits", ("memory", "swap", "engine_min_memory"))
    limits = Limits(memory=lim.size("memory"), swap=lim.size("swap", default=0),
                    engine_min_memory=lim.size("engine_min_memory"))
    floor = max(limits.engine_min_memory, DOCKER_MIN_MEMORY)
    if limits.memory < floor:
        raise lim.fail("memory", f"{format_size(limits.memory)} is impossible: the engine needs "
                                 f"at least {format_size(floor)} ({floor} bytes) to start")
    return limits


def _sweep(top: _Section) -> SweepSpec | None:
    if "sweep" not in top.value:
        return None
    sweep = top.section("sweep", ("memory", "n_predict"))
    items = sweep.get("memory", list)
    if not items:
        raise sweep.fail("memory", "list at least one limit (a size such as 6GiB or a "
                                   "fraction of the model file such as 0.5)")
    points = []
    for item in items:
        try:
            points.append(parse_memory_point(item))
        except ConfigError as exc:
            raise sweep.fail("memory", str(exc)) from None
    n_predict = sweep.get("n_predict", int, default=None)
    if n_predict is not None and n_predict < 1:
        raise sweep.fail("n_predict", "must be at least 1")
    return SweepSpec(memory=tuple(points), n_predict=n_predict)


def parse_profile(raw: Any, path: Path, text: str) -> Profile:
    top = _Section(path, "", raw, ("schema_version", "name", "description", "model", "target",
                                   "gpu", "limits", "engine", "variants", "schedule", "trace",
                                   "evidence", "sweep"))
    version = top.get("schema_version", int)
    if version != SCHEMA_VERSION:
        raise top.fail("schema_version", f"unsupported version {version} "
                                         f"(this tool reads {SCHEMA_VERSION})")
    name = top.get("name", str)
    if not NAME_RE.match(name):
        raise top.fail("name", f"{name!r}: use lowercase letters, digits, '.', '_' and '-'")
    target = top.choice("target", TARGETS)
    gpu = top.choice("gpu", GPU_NEEDS)
    if target == "cpu" and gpu == "required":
        raise top.fail("gpu", "a cpu target cannot require a GPU")
    if target in ("sm89", "sm120") and gpu == "none":
        raise top.fail("gpu", f"target {target} runs on a GPU: set gpu to required")
    engine = top.section("engine", ("args",))
    return Profile(
        name=name,
        description=top.get("description", str),
        source_path=path,
        source_text=text,
        model=_model(top),
        target=target,
        gpu=gpu,
        limits=_limits(top),
        engine_args=_strings(engine, "args"),
        variants=_variants(top),
        schedule=_schedule(top),
        trace=top.get("trace", bool),
        evidence=_strings(top, "evidence"),
        sweep=_sweep(top),
    )


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str) -> Path:
    """A built-in profile's name, or the path of a user's YAML file."""
    if NAME_RE.match(name_or_path) and (PROFILES_DIR / f"{name_or_path}.yaml").is_file():
        return PROFILES_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.is_file():
        return path
    known = ", ".join(builtin_profiles())
    raise ConfigError(f"no profile {name_or_path!r}: name a built-in ({known}) or a YAML file")


def load_profile(name_or_path: str) -> Profile:
    path = resolve_profile_path(name_or_path)
    text = path.read_text()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    profile = parse_profile(raw, path, text)
    if path.parent == PROFILES_DIR and profile.name != path.stem:
        raise ConfigError(f"{path}: name: {profile.name!r} differs from the file name")
    return profile
