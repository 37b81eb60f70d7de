"""Experiment profiles: YAML files naming a model, limits, variants and a schedule.

Built-in profiles live in `appliance/profiles/` as package data; a user's file is accepted by
path. Loading reads the YAML strictly (appliance.core.strict_load), validates it against
`appliance/schemas/profile.schema.json` and then checks what a schema cannot say (sizes, the
engine's memory floor, unique variant names, target against gpu): unknown keys, wrong types
and impossible limits are refused with one line naming the file and the field's JSON pointer.
"""

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.paths import PACKAGE_DIR
from appliance.core.records import Record
from appliance.core.strict_load import parse_yaml, read_text
from appliance.core.units import PAGE_BYTES, SizeError, format_size, parse_size
from appliance.core.validation import validate
from appliance.host.read_ahead import ReadAheadMode
from appliance.models import skeleton
from appliance.models.full_synth import DEFAULT_ROUTER, ROUTERS
from appliance.planner.pages import is_demand_mapped
from appliance.runs.memory_points import MemoryPoint, parse_memory_point
from appliance.runs.placement import Placement, check_placement_args, parse_placement
from appliance.trace.names import ROUTING_KNOBS

PROFILES_DIR = PACKAGE_DIR / "profiles"
MAX_PROFILE_BYTES = 64 << 10  # the built-in profiles are under 2 KiB
DOCKER_MIN_MEMORY = 6 * 1024 * 1024
MAX_SIZE = (1 << 63) - 1
# twice this project's VM's 8 MiB: a larger read-ahead is more likely MiB written for KiB
MAX_READ_AHEAD = 16 << 20
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# model.synth of a full-shape synthetic (`model synth --like`): the input and what varies it
LIKE_SYNTH_KEYS: dict[str, type | tuple[type, ...]] = {
    "like": str,
    "seed": int,
    "skew": (int, float),
    "layers": int,
    "used": int,
    "router": str,
}


@dataclass(frozen=True)
class ModelManifest(Record):
    file: str
    bytes: int | None
    sha256: str | None
    source: str
    synth: dict[str, Any] | None = None

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None and self.bytes is not None

    @property
    def like(self) -> str | None:
        """The skeleton input a full-shape synthetic is made like (model.synth.like), if any."""
        return None if not self.synth or "like" not in self.synth else str(self.synth["like"])

    def synth_args(self) -> list[str]:
        """`appliance model synth` options that recreate a synthesized model ([] if none):
        each key of model.synth becomes --key value; `like` names the skeleton input's path."""
        args: list[str] = []
        for key, value in (self.synth or {}).items():
            text = str(skeleton.input_path(str(value))) if key == "like" else str(value)
            args += [f"--{key}", text]
        return args


@dataclass(frozen=True)
class RoutesSynth:
    """`routes.synth`: a synthetic trace to force, with the shape's calibrated knobs (`trace synth
    --calibrated`) or, for a shape without a fit, the profile's own `knobs`."""

    layers: int
    experts: int
    k: int
    prompt: int  # the profile's prompt's tokens in the synthetic byte vocabulary
    decode: int
    seed: int
    knobs: tuple[tuple[str, float], ...] = ()  # the profile's routing knobs; (): the shape's fit

    def describe(self) -> str:
        shape = (
            f"{self.layers} layers x {self.experts} experts, k = {self.k}, "
            f"{self.prompt} prompt + {self.decode} decode tokens, seed {self.seed}"
        )
        if not self.knobs:
            return f"a calibrated synthetic trace ({shape})"
        knobs = ", ".join(f"{name} {value:g}" for name, value in self.knobs)
        return f"a synthetic trace with the profile's knobs, not a calibrated fit ({shape}; {knobs})"


@dataclass(frozen=True)
class RoutesManifest:
    """`routes:` a routes file made in the models directory from a route trace in the checkout
    (`from:`) or from a calibrated synthetic trace (`synth:`), exactly one of them."""

    file: str
    sha256: str
    source: str | None  # a route_trace v1 CSV, by its path in the checkout (`from:`)
    layers: int | None = None  # the model's first N layers only (a slice's routes)
    synth: RoutesSynth | None = None

    @property
    def origin(self) -> str:
        """What the routes are made from, for messages."""
        return self.synth.describe() if self.synth is not None else str(self.source)


@dataclass(frozen=True)
class MemoryLimits:
    memory: int
    swap: int
    engine_min_memory: int
    vram: int | None = None  # the budget for what may sit on the GPU; None: no budget
    read_ahead_kb: int | None = None  # the model device's read-ahead during trials; None: as found
    read_ahead_mode: ReadAheadMode = ReadAheadMode.OBSERVE

    @property
    def read_ahead_to_set_kb(self) -> int | None:
        """What the runner writes as the model device's read-ahead; None: it only observes."""
        return self.read_ahead_kb if self.read_ahead_mode == ReadAheadMode.SET else None

    @property
    def memswap(self) -> int:
        """Docker's memswap_limit: memory plus swap (equal to memory when swap is 0)."""
        return self.memory + self.swap


STAND_IN_GPU = "stand-in"  # a profile's `gpu` that asks for the stand-in device (runs.device_server)


@dataclass(frozen=True)
class Variant(Record):
    name: str
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    # an earlier variant whose route trace (same limit, same repeat) is this one's --future
    future: str | None = None
    # a routes file in the models directory that forces the router's choices (--routes-from)
    routes: str | None = None
    # on a device, op_offload as asked; None: off for a demand-mapped variant (no_op_offload)
    op_offload: bool | None = None

    def no_op_offload(self, gpu: str) -> bool:
        """Whether the engine gets --no-op-offload: on a device (`gpu` not none), a variant that
        asks for op_offload off, or a demand-mapped one that does not ask."""
        if gpu == "none":
            return False
        if self.op_offload is not None:
            return not self.op_offload
        return is_demand_mapped(self.env)


@dataclass(frozen=True)
class Schedule(Record):
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
    limits: MemoryLimits
    engine_args: tuple[str, ...]
    variants: tuple[Variant, ...]
    schedule: Schedule
    trace: bool
    evidence: tuple[str, ...]
    sweep: "SweepSpec | None" = None  # `sweep: {memory: [...], n_predict: N}`
    experimental: tuple[str, ...] = ()  # experimental patches the engine image must carry
    placement: Placement = Placement("auto")  # where the model lives (appliance.runs.placement)
    routes: RoutesManifest | None = None  # a routes file the run makes when missing

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise ConfigError(f"profile {self.name}: no variant {name!r}")


def _size(raw: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    if key not in raw and default is not None:
        return default
    try:
        size = parse_size(raw[key])
    except (SizeError, OverflowError) as exc:
        raise ConfigError(f"{path}: /limits/{key}: {exc}") from None
    if size > MAX_SIZE:
        raise ConfigError(f"{path}: /limits/{key}: {raw[key]!r} is more than {MAX_SIZE} bytes")
    return size


def _read_ahead_kb(raw: dict[str, Any], path: Path) -> int | None:
    """limits.read_ahead in KiB: whole 4 KiB pages (the kernel keeps read_ahead_kb in pages and
    would round anything else down) from one page to MAX_READ_AHEAD."""
    if "read_ahead" not in raw:
        if raw.get("read_ahead_mode") == ReadAheadMode.SET:
            raise ConfigError(
                f"{path}: /limits/read_ahead_mode: set needs limits.read_ahead, the value to set"
            )
        return None
    size, given = _size(raw, "read_ahead", path), raw["read_ahead"]
    where = f"{path}: /limits/read_ahead: {given!r}"
    if size < PAGE_BYTES:
        raise ConfigError(f"{where} is below 4 KiB, one page: the least read-ahead that reads anything")
    if size > MAX_READ_AHEAD:
        raise ConfigError(f"{where} is above {format_size(MAX_READ_AHEAD, trim=True)}")
    if size % PAGE_BYTES:
        raise ConfigError(
            f"{where} is {size} bytes, not a whole number of 4 KiB pages: the kernel would round it "
            f"down to {format_size(size - size % PAGE_BYTES, trim=True)}; write KiB, e.g. 128KiB"
        )
    return size // 1024


def _limits(raw: dict[str, Any], path: Path) -> MemoryLimits:
    read_ahead_kb = _read_ahead_kb(raw, path)
    limits = MemoryLimits(
        memory=_size(raw, "memory", path),
        swap=_size(raw, "swap", path, default=0),
        engine_min_memory=_size(raw, "engine_min_memory", path),
        vram=_size(raw, "vram", path) if "vram" in raw else None,
        read_ahead_kb=read_ahead_kb,
        read_ahead_mode=ReadAheadMode(
            raw.get("read_ahead_mode", "observe" if read_ahead_kb is None else "set")
        ),
    )
    floor = max(limits.engine_min_memory, DOCKER_MIN_MEMORY)
    if limits.memory < floor:
        raise ConfigError(
            f"{path}: /limits/memory: {format_size(limits.memory, trim=True)} is "
            f"impossible: the engine needs at least {format_size(floor, trim=True)} "
            f"({floor} bytes) to start"
        )
    return limits


# options of a newer llama.cpp than the canonical pin: refused while profiles run only images of
# the canonical track (an image of the current track is refused at build, appliance/images/build.py)
CURRENT_TRACK_OPTIONS = {
    "--moe-cache-mib": "upstream's MoE expert cache exists only on the current track (llama.cpp "
    "b11549, the lock's tracks.current), whose engine images are not built yet",
}


def _check_track_args(args: tuple[str, ...], pointer: str) -> None:
    for arg in args:
        name = arg.partition("=")[0]
        if name in CURRENT_TRACK_OPTIONS:
            raise ConfigError(f"{pointer}: {name}: {CURRENT_TRACK_OPTIONS[name]}: remove it from the profile")


def _variants(items: list[dict[str, Any]], path: Path) -> tuple[Variant, ...]:
    variants: dict[str, Variant] = {}
    for index, item in enumerate(items):
        if item["name"] in variants:
            raise ConfigError(f"{path}: /variants/{index}/name: {item['name']!r} appears twice")
        future = item.get("future")
        if future is not None and future not in variants:
            raise ConfigError(
                f"{path}: /variants/{index}/future: {future!r} is not a variant before this one "
                "(the trial whose trace is the future must run first)"
            )
        variants[item["name"]] = Variant.from_json(item, f"{path}: /variants/{index}")
    return tuple(variants.values())


def _check_like_synth(synth: dict[str, Any] | None, path: Path) -> None:
    """A model.synth with `like` takes only LIKE_SYNTH_KEYS, of their types (the input itself
    is looked up when the model is made: an installed package has no evidence/ to look in)."""
    if not synth or "like" not in synth:
        return
    for key, value in synth.items():
        kind = LIKE_SYNTH_KEYS.get(key)
        if kind is None:
            raise ConfigError(
                f"{path}: /model/synth/{key}: not an option of a full-shape synthetic "
                f"(`like` takes {', '.join(LIKE_SYNTH_KEYS)})"
            )
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{path}: /model/synth/{key}: {value!r} has the wrong type")
    if synth.get("router", DEFAULT_ROUTER) not in ROUTERS:
        raise ConfigError(
            f"{path}: /model/synth/router: {synth['router']!r} is not one of {', '.join(ROUTERS)}"
        )


def _check_gpu(raw: dict[str, Any], path: Path) -> None:
    target, gpu = raw["target"], raw["gpu"]

    if target == "cpu" and gpu == "required":
        raise ConfigError(f"{path}: /gpu: a cpu target cannot require a GPU")
    if target in ("sm89", "sm120") and gpu in ("none", STAND_IN_GPU):
        raise ConfigError(f"{path}: /gpu: target {target} runs on a GPU: set gpu to required")
    if gpu == STAND_IN_GPU and "vram" not in raw["limits"]:
        raise ConfigError(f"{path}: /limits/vram: gpu stand-in needs the device's size (e.g. vram: 256MiB)")


def _sweep(raw: dict[str, Any] | None, path: Path) -> SweepSpec | None:
    if raw is None:
        return None
    points = []
    for index, item in enumerate(raw["memory"]):
        try:
            points.append(parse_memory_point(item))
        except ConfigError as exc:
            raise ConfigError(f"{path}: /sweep/memory/{index}: {exc}") from None
    return SweepSpec(memory=tuple(points), n_predict=raw.get("n_predict"))


def parse_profile(raw: Any, path: Path, text: str) -> Profile:
    """The profile from its YAML data, validated against appliance/schemas/profile.schema.json
    and then the rules a schema cannot say."""
    validate(raw, "profile", path)
    _check_gpu(raw, path)
    for index, item in enumerate(raw["variants"]):
        if "future" in item and not raw["trace"]:
            raise ConfigError(
                f"{path}: /variants/{index}/future: needs trace: true (a future is a route trace)"
            )
        if "routes" in item and not raw["trace"]:
            raise ConfigError(
                f"{path}: /variants/{index}/routes: needs trace: true "
                "(the trace shows the routes were forced)"
            )
    model = raw["model"]
    _check_like_synth(model.get("synth"), path)
    check_placement_args(tuple(raw["engine"].get("args", [])), f"{path}: /engine/args")
    _check_track_args(tuple(raw["engine"].get("args", [])), f"{path}: /engine/args")
    for index, item in enumerate(raw["variants"]):
        check_placement_args(tuple(item.get("args", [])), f"{path}: /variants/{index}/args")
        _check_track_args(tuple(item.get("args", [])), f"{path}: /variants/{index}/args")
    limits = _limits(raw["limits"], path)
    return Profile(
        name=raw["name"],
        description=raw["description"],
        source_path=path,
        source_text=text,
        model=ModelManifest.from_json(model, f"{path}: /model"),
        target=raw["target"],
        gpu=raw["gpu"],
        limits=limits,
        engine_args=tuple(raw["engine"].get("args", [])),
        variants=_variants(raw["variants"], path),
        schedule=Schedule.from_json(raw["schedule"], f"{path}: /schedule"),
        trace=raw["trace"],
        evidence=tuple(raw.get("evidence", [])),
        sweep=_sweep(raw.get("sweep"), path),
        experimental=tuple(raw["engine"].get("experimental", [])),
        placement=parse_placement(raw.get("placement"), limits.vram, path),
        routes=_routes(raw, path),
    )


def _routes(raw: dict[str, Any], path: Path) -> RoutesManifest | None:
    """`routes:`, which some variant must force (its `routes` names the file)."""
    item = raw.get("routes")
    if item is None:
        return None
    if not any(variant.get("routes") == item["file"] for variant in raw["variants"]):
        raise ConfigError(
            f"{path}: /routes/file: no variant forces {item['file']}; name it in a variant's routes"
        )
    if ("from" in item) == ("synth" in item):
        raise ConfigError(
            f"{path}: /routes: give exactly one of from: (a route trace in the checkout) and synth: "
            "(a calibrated synthetic trace)"
        )
    synth = _routes_synth(item["synth"], raw, path) if "synth" in item else None
    return RoutesManifest(item["file"], item["sha256"], item.get("from"), item.get("layers"), synth)


def _routes_synth(item: dict[str, Any], raw: dict[str, Any], path: Path) -> RoutesSynth:
    """`routes.synth`, its prompt the schedule's prompt's tokens (one per byte in the synthetic
    models' byte vocabulary) and its decode at least every run's decode length."""
    prompt = raw["schedule"]["prompt"]
    if "  " in prompt:
        raise ConfigError(
            f"{path}: /schedule/prompt: routes.synth needs a prompt without runs of spaces (the "
            "synthetic vocabulary merges them, so its length in tokens is not its bytes)"
        )
    sweep_decode = (raw.get("sweep") or {}).get("n_predict") or 0
    longest = max(raw["schedule"]["n_predict"], sweep_decode)
    if item["decode"] < longest:
        raise ConfigError(
            f"{path}: /routes/synth/decode: {item['decode']} decode tokens, but a run of this profile "
            f"decodes {longest}; route forcing needs routes for every token"
        )
    return RoutesSynth(
        layers=item["layers"],
        experts=item["experts"],
        k=item["k"],
        prompt=len(prompt.encode()),
        decode=item["decode"],
        seed=item.get("seed", 0),
        knobs=tuple((name, item["knobs"][name]) for name in ROUTING_KNOBS if name in item.get("knobs", {})),
    )


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str) -> Path:
    """A built-in profile's name, or the path of a user's YAML file."""
    if NAME_RE.match(name_or_path) and (PROFILES_DIR / f"{name_or_path}.yaml").is_file():
        return PROFILES_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.exists():
        return path
    known = ", ".join(builtin_profiles())
    raise ConfigError(f"no profile {name_or_path!r}: name a built-in ({known}) or a YAML file")


def load_profile(name_or_path: str) -> Profile:
    path = resolve_profile_path(name_or_path)
    text = read_text(path, MAX_PROFILE_BYTES)
    profile = parse_profile(parse_yaml(text, path), path, text)
    if path.parent == PROFILES_DIR and profile.name != path.stem:
        raise ConfigError(f"{path}: /name: {profile.name!r} differs from the file name")
    return profile


def select_variants(profile: Profile, names: tuple[str, ...]) -> Profile:
    """The profile with only the variants `names` (in the profile's order; none given: all of
    them). A variant whose future is another needs that one too. The profile's text (what the
    bundle keeps) is unchanged; the schedule says which variants ran."""
    if not names:
        return profile
    known = [variant.name for variant in profile.variants]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(
            f"--variants: profile {profile.name} has no variant {', '.join(map(repr, unknown))}: "
            f"choose among {', '.join(known)}"
        )
    chosen = tuple(variant for variant in profile.variants if variant.name in names)
    for variant in chosen:
        if variant.future is not None and variant.future not in names:
            raise ConfigError(
                f"--variants: {variant.name} replays {variant.future}'s route trace as its future: "
                f"add {variant.future}"
            )
    return dataclasses.replace(profile, variants=chosen)
