"""A variant's explicit `--expert-cache-capacity N` (patch 0004) against each trial's memory
limit, checked before any trial starts.

Inside the trial the engine's cache keeps N whole experts of the model's largest expert size
resident in the trial's cgroup, beside every model byte on the host that is not a routed expert
(with a device, the trial's placement decides which: runs.placement.Offload), the experts
read ahead (`--expert-lookahead L`: L x k of them) and the engine's own memory, which the
profile's `engine_min_memory` bounds from below. A capacity more than that leaves room for can
only end in reclaim inside the resident set (or an OOM kill), so it is refused in one line;
`auto` computes the same room from the memory the engine has really mapped (docs/sweeps.md,
"The expert cache"), so it is never refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from appliance.core.errors import ConfigError
from appliance.planner.accounting import account_file
from appliance.planner.offload import host_non_expert_bytes
from appliance.runs.placement import offload_of
from appliance.runs.plan import Trial
from appliance.runs.profile import Profile
from appliance.trace.expert_bytes import gguf_expert_layout

CAPACITY_FLAG = "--expert-cache-capacity"
LOOKAHEAD_FLAG = "--expert-lookahead"


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value after `flag` in an engine argument list, None when the flag is absent."""
    for index, arg in enumerate(args[:-1]):
        if arg == flag:
            return args[index + 1]
    return None


def explicit_capacity(args: Sequence[str]) -> int | None:
    """N of `--expert-cache-capacity N`; None for `auto`, a value the engine refuses itself, or
    no expert cache at all."""
    value = flag_value(args, CAPACITY_FLAG)
    return int(value) if value is not None and value.isdigit() else None


def room_for_experts(limit: int, fixed_bytes: int, one_expert: int) -> int:
    """Whole experts of `one_expert` bytes that fit in `limit` beside `fixed_bytes`."""
    return max(0, (limit - fixed_bytes) // one_expert)


def check_cache_capacity(
    profile: Profile, trials: Sequence[Trial], model_path: Path, model_bytes: int
) -> None:
    """ConfigError, in one line, for the first trial whose variant asks for more experts than
    its memory limit leaves room for; nothing for variants without an explicit capacity.
    `model_bytes` is the model's size (a header-only skeleton's file is smaller); each trial
    carries its placement (prepare.place_trials)."""
    asked = {trial.variant.name: explicit_capacity(trial.variant.args) for trial in trials}
    if not any(capacity is not None for capacity in asked.values()):
        return
    _, n_used, per_layer = gguf_expert_layout(model_path)
    one_expert = max(per_layer.values())
    accounting = account_file(model_path)
    seen: set[tuple[str, int, tuple[str, ...]]] = set()
    for trial in trials:
        capacity = asked.get(trial.variant.name)
        limit = trial.memory_limit(profile)
        if capacity is None or (trial.variant.name, limit, trial.placement) in seen:
            continue
        seen.add((trial.variant.name, limit, trial.placement))
        facts = accounting.facts
        offload = offload_of(trial.placement, facts.layers + facts.nextn_layers)
        non_expert = host_non_expert_bytes(accounting, offload, model_bytes)
        lookahead = flag_value(trial.variant.args, LOOKAHEAD_FLAG)
        ahead = int(lookahead) * n_used * one_expert if lookahead and lookahead.isdigit() else 0
        fixed = non_expert + profile.limits.engine_min_memory + ahead
        room = room_for_experts(limit, fixed, one_expert)
        if capacity > room:
            raise ConfigError(
                f"variant {trial.variant.name}: {CAPACITY_FLAG} {capacity} does not fit in "
                f"{limit:,} bytes of memory: {capacity} experts of {one_expert:,} bytes beside "
                f"{fixed:,} bytes that are not cached experts leave room for at most {room}; "
                f"ask for at most {room}, or auto"
            )
