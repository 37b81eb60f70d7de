"""What a run bundle says about its scope and results (`BundleFacts`), read without trusting
its names; the full verification a bundle must pass before evidence reads it
(`verified_input`); the findings a bundle claims to reproduce (`claimed_evidence`).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.attest.verify import Verdict, Verification, verify_bundle
from appliance.core.errors import ApplianceError
from appliance.core.strict_load import load_json, load_yaml
from appliance.core.units import size_or_none
from appliance.evidence.finding import current_ids, load_findings
from appliance.runs.run_dir import MODEL_INPUT, PROFILE_INPUT, SCHEDULE_INPUT, RunDir

UNTRUSTED_INPUT = "untrusted input"


def verified_input(bundle: Path, pubkey: Any = None, allow_untrusted: bool = False) -> Verification:
    """Full verification of a bundle evidence is to read; refuses what does not verify.

    A tampered bundle is always refused. An unsigned bundle, or one signed by a key that is
    not trusted, is refused unless allow_untrusted: then it is read as untrusted input. An
    incomplete run passes here and is reported as not comparable.
    """
    result = verify_bundle(bundle, pubkey, allow_untrusted=allow_untrusted, allow_unsigned=allow_untrusted)
    if result.accepted or result.verdict is Verdict.INCOMPLETE:
        return result
    hint = "" if result.verdict is Verdict.TAMPERED else " (or pass --allow-untrusted)"
    raise ApplianceError(
        f"{bundle}: bundle {result.verdict.label}: {result.advice}{hint}", exit_code=result.exit_code
    )


def read_mapping(path: Path) -> dict[str, Any]:
    """A bundle file's top-level object through the strict readers; {} when it is missing,
    unreadable or not an object (the verdict, not this reader, says what is wrong with it)."""
    reader = load_yaml if path.suffix == ".yaml" else load_json
    try:
        value = reader(path)
    except ApplianceError:
        return {}
    return value if isinstance(value, dict) else {}


def as_mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class BundleFacts:
    """What a run bundle says about its scope and results, read without trusting its names."""

    profile: dict[str, Any]
    model: dict[str, Any]
    memory_limit_bytes: int | None
    swap_bytes: int | None
    n_predict: int | None
    repeats: int | None
    gpus: list[str]
    results: dict[str, Any]

    @classmethod
    def read(cls, run_dir: Path) -> "BundleFacts":
        layout = RunDir(run_dir)
        profile = read_mapping(layout.input(PROFILE_INPUT))
        schedule = read_mapping(layout.input(SCHEDULE_INPUT))
        run = layout.read_run()
        provenance = read_mapping(layout.provenance_file)
        limits = run.limits if run is not None else None
        plimits = as_mapping(profile.get("limits"))
        memory = size_or_none(limits.memory_bytes if limits is not None else plimits.get("memory"))
        memswap = limits.memswap_bytes if limits is not None else None
        swap = (
            memswap - memory
            if memory is not None and memswap is not None
            else size_or_none(plimits.get("swap"))
        )
        n_predict = schedule.get("n_predict", as_mapping(profile.get("schedule")).get("n_predict"))
        repeats = schedule.get("repeats")
        gpus = as_mapping(provenance.get("host")).get("gpus")
        return cls(
            profile=profile,
            model=read_mapping(layout.input(MODEL_INPUT)),
            memory_limit_bytes=memory,
            swap_bytes=swap,
            n_predict=n_predict if type(n_predict) is int else None,
            repeats=repeats if type(repeats) is int else None,
            gpus=[str(g.get("name", "")) for g in gpus if isinstance(g, dict)]
            if isinstance(gpus, list)
            else [],
            results=read_mapping(layout.results_file),
        )

    def median(self, variant: str, metric: str) -> float | None:
        entry = as_mapping(as_mapping(self.results.get("variants")).get(variant)).get(metric)
        if isinstance(entry, dict):
            entry = entry.get("median")
        return float(entry) if isinstance(entry, int | float) else None

    def byte_identical(self) -> bool | None:
        value = self.results.get("byte_identity")
        if isinstance(value, dict):
            value = value.get("all_identical")
        return value if isinstance(value, bool) else None


def claimed_evidence(run_dir: Path, directory: Path | None = None) -> list[str]:
    """The evidence ids a run's profile says it reproduces (key `evidence` or `reproduces`),
    each superseded one replaced by its successor; for a sweep, the current (not superseded)
    findings with a `sweep` section drawn from the same profile."""
    facts = BundleFacts.read(run_dir)
    if isinstance(facts.results.get("sweep"), dict):
        return [
            f.id
            for f in load_findings(directory)
            if "sweep" in f.raw and f.raw["profile"] == facts.profile.get("name") and f.superseded_by is None
        ]
    named = facts.profile.get("evidence", facts.profile.get("reproduces")) or []
    return current_ids([named] if isinstance(named, str) else [str(n) for n in named], directory)
