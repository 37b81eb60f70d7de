"""Evidence: machine-readable findings in evidence/ and the comparison of a run bundle with one.

Each finding is one JSON file valid against appliance/schemas/finding.schema.json (spec in
docs/evidence.md), read strictly (appliance.core.strict_load). `compare` decides whether a
verified run bundle reproduces a finding: the scope must match (model file, GPU, memory
limit, tokens), then every claim must hold (same direction, ratio treatment/baseline within
the stated tolerance) and byte identity must be what the finding says. The verdict is
reproduced, not reproduced or not comparable, with the reasons.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from appliance.attest.verify import Verdict, Verification, verify_bundle
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import evidence_dir
from appliance.core.strict_load import load_json, load_yaml
from appliance.core.units import size_or_none
from appliance.core.validation import load_schema as load_named_schema
from appliance.core.validation import raise_for, schema_errors
from appliance.evidence import sweep_claims
from appliance.evidence.contamination import with_contamination
from appliance.runs.run_dir import MODEL_INPUT, PROFILE_INPUT, RESULTS_FILE, SCHEDULE_INPUT, RunDir

SCHEMA_NAME = "finding"
MAX_FINDING_BYTES = 256 << 10  # published findings are under 4 KiB
REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE = "reproduced", "not reproduced", "not comparable"
UNTRUSTED_INPUT = "untrusted input"
RATIO_CONSISTENCY = 1e-3


def load_schema() -> dict[str, Any]:
    """The findings schema, shipped with the package (appliance/schemas/finding.schema.json)."""
    return load_named_schema(SCHEMA_NAME)


@dataclass(frozen=True)
class Finding:
    """One evidence file: its id, where it was read from and its validated content."""

    id: str
    path: Path
    raw: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.raw["status"])

    @property
    def scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = self.raw["scope"]
        return scope


def _ratio_problems(raw: dict[str, Any]) -> list[str]:
    problems = []
    values = {m["name"]: m["values"] for m in raw.get("metrics", [])}
    for index, claim in enumerate(raw.get("claims", [])):
        where = f"/claims/{index}"
        for role in ("baseline", "treatment"):
            if claim[role] not in raw["variants"]:
                problems.append(f"{where}/{role}: variant {claim[role]!r} is not in variants")
        ratio = claim["ratio"]
        if ratio is not None and (ratio < 1) != (claim["direction"] == "lower"):
            problems.append(f"{where}: ratio {ratio} contradicts direction {claim['direction']!r}")
        measured = values.get(claim["metric"], {})
        if claim["ratio"] is not None and measured.get(claim["baseline"]) and claim["treatment"] in measured:
            actual = measured[claim["treatment"]] / measured[claim["baseline"]]
            if abs(actual / claim["ratio"] - 1) > RATIO_CONSISTENCY:
                problems.append(
                    f"{where}: ratio {claim['ratio']} disagrees with the metric values ({actual:.5f})"
                )
    return problems


def validate_finding(raw: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """Schema violations plus the rules a schema cannot say, one line each naming the field's
    JSON pointer; [] when the finding is valid. `schema` is accepted for callers that loaded
    it; validation always uses the packaged schema."""
    errors = schema_errors(raw, SCHEMA_NAME)
    if errors:
        return errors
    if raw["origin"] == "reproduction" and raw["bundle_digest"] is None:
        errors.append("/bundle_digest: a reproduction must name the bundle it came from")
    if raw["status"] == "rejected" and not raw.get("rejected_because"):
        errors.append("/rejected_because: a rejected finding must say why")
    variants = set(raw["variants"])
    for index, metric in enumerate(raw["metrics"]):
        unknown = set(metric["values"]) - variants
        if unknown:
            errors.append(f"/metrics/{index}/values: values for unknown variants {sorted(unknown)}")
    return errors + _ratio_problems(raw)


def load_finding(path: Path, schema: dict[str, Any] | None = None) -> Finding:
    raw = load_json(path, MAX_FINDING_BYTES)
    errors = validate_finding(raw, schema)
    if errors:
        raise_for(path, errors)
    if raw["id"] != path.stem:
        raise ConfigError(f"{path}: /id: {raw['id']!r} must equal the file name {path.stem!r}")
    return Finding(id=raw["id"], path=path, raw=raw)


def load_findings(directory: Path | None = None) -> list[Finding]:
    directory = directory or evidence_dir()
    return [load_finding(p) for p in sorted(directory.glob("*.json"))]


def find_finding(finding_id: str, directory: Path | None = None) -> Finding:
    findings = {f.id: f for f in load_findings(directory)}
    if finding_id not in findings:
        raise ConfigError(
            f"no evidence {finding_id!r}: `appliance evidence list` shows {', '.join(sorted(findings))}"
        )
    return findings[finding_id]


@dataclass
class ClaimResult:
    claim: str
    holds: bool | None
    reason: str


@dataclass
class Comparison:
    evidence: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    claims: list[ClaimResult] = field(default_factory=list)
    untrusted_input: bool = False

    def as_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["input"] = UNTRUSTED_INPUT if self.untrusted_input else "verified input"
        return result


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


def _read_mapping(path: Path) -> dict[str, Any]:
    """A bundle file's top-level object through the strict readers; {} when it is missing,
    unreadable or not an object (the verdict, not this reader, says what is wrong with it)."""
    reader = load_yaml if path.suffix == ".yaml" else load_json
    try:
        value = reader(path)
    except ApplianceError:
        return {}
    return value if isinstance(value, dict) else {}


def _obj(value: Any) -> dict[str, Any]:
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
        profile = _read_mapping(layout.input(PROFILE_INPUT))
        schedule = _read_mapping(layout.input(SCHEDULE_INPUT))
        run = _read_mapping(layout.run_file)
        provenance = _read_mapping(layout.provenance_file)
        limits = _obj(run.get("limits"))
        plimits = _obj(profile.get("limits"))
        memory = size_or_none(limits.get("memory_bytes", plimits.get("memory")))
        memswap = size_or_none(limits.get("memswap_bytes"))
        swap = (
            memswap - memory
            if memory is not None and memswap is not None
            else size_or_none(plimits.get("swap"))
        )
        n_predict = schedule.get("n_predict", _obj(profile.get("schedule")).get("n_predict"))
        repeats = schedule.get("repeats")
        gpus = _obj(provenance.get("host")).get("gpus")
        return cls(
            profile=profile,
            model=_read_mapping(layout.input(MODEL_INPUT)),
            memory_limit_bytes=memory,
            swap_bytes=swap,
            n_predict=n_predict if type(n_predict) is int else None,
            repeats=repeats if type(repeats) is int else None,
            gpus=[str(g.get("name", "")) for g in gpus if isinstance(g, dict)]
            if isinstance(gpus, list)
            else [],
            results=_read_mapping(layout.results_file),
        )

    def median(self, variant: str, metric: str) -> float | None:
        entry = _obj(_obj(self.results.get("variants")).get(variant)).get(metric)
        if isinstance(entry, dict):
            entry = entry.get("median")
        return float(entry) if isinstance(entry, int | float) else None

    def byte_identical(self) -> bool | None:
        value = self.results.get("byte_identity")
        if isinstance(value, dict):
            value = value.get("all_identical")
        return value if isinstance(value, bool) else None


def claimed_evidence(run_dir: Path, directory: Path | None = None) -> list[str]:
    """The evidence ids a run's profile says it reproduces (key `evidence` or `reproduces`);
    for a sweep, the findings with a `sweep` section drawn from the same profile."""
    facts = BundleFacts.read(run_dir)
    if isinstance(facts.results.get("sweep"), dict):
        return [
            f.id
            for f in load_findings(directory)
            if "sweep" in f.raw and f.raw["profile"] == facts.profile.get("name")
        ]
    named = facts.profile.get("evidence", facts.profile.get("reproduces")) or []
    return [named] if isinstance(named, str) else [str(n) for n in named]


def _scope_mismatches(facts: BundleFacts, finding: Finding) -> tuple[list[str], list[str]]:
    """(reasons the run is not comparable, caveats that do not prevent comparison)."""
    scope, blockers, caveats = finding.scope, [], []
    model = scope["model"]
    if model["sha256"] is not None:
        if facts.model.get("sha256") != model["sha256"]:
            blockers.append(
                f"another model file: the run used {facts.model.get('file')!r} "
                f"(sha256 {str(facts.model.get('sha256'))[:12]}), the evidence "
                f"{model['name']} (sha256 {model['sha256'][:12]})"
            )
    elif model["file"] is not None and facts.model.get("file") != model["file"]:
        blockers.append(f"another model file: {facts.model.get('file')!r}, not {model['file']!r}")
    else:
        caveats.append("the evidence does not pin its model file by sha256: compared by scope alone")
    gpu = scope["hardware"]["gpu"]
    if gpu is not None and not any(
        gpu.lower() in g.lower() or g.lower() in gpu.lower() for g in facts.gpus if g
    ):
        ran = ", ".join(facts.gpus) or "no GPU"
        blockers.append(f"another GPU: the evidence was measured on {gpu}, this run on {ran}")
    elif gpu is None and scope["target"] not in (None, "cpu"):
        caveats.append("the evidence does not name its GPU")
    for key, actual in (
        ("memory_limit_bytes", facts.memory_limit_bytes),
        ("swap_bytes", facts.swap_bytes),
        ("n_predict", facts.n_predict),
    ):
        wanted = scope[key]
        if wanted is not None and actual is None:
            blockers.append(f"the run does not record {key} (the evidence used {wanted})")
        elif wanted is not None and actual != wanted:
            blockers.append(f"another {key}: the run used {actual}, the evidence {wanted}")
    return blockers, caveats


def _check_claim(facts: BundleFacts, claim: dict[str, Any]) -> ClaimResult:
    label = f"{claim['metric']} {claim['treatment']}/{claim['baseline']}"
    base = facts.median(claim["baseline"], claim["metric"])
    treat = facts.median(claim["treatment"], claim["metric"])
    if base is None or treat is None or base == 0:
        return ClaimResult(
            label,
            None,
            f"{RESULTS_FILE} has no median {claim['metric']} for "
            f"{claim['baseline']!r} and {claim['treatment']!r}",
        )
    observed = treat / base
    direction_ok = observed < 1 if claim["direction"] == "lower" else observed > 1
    if not direction_ok:
        return ClaimResult(
            label,
            False,
            f"observed ratio {observed:.4g}: the treatment is not {claim['direction']} than the baseline",
        )
    if claim["ratio"] is None:
        return ClaimResult(
            label,
            True,
            f"observed ratio {observed:.4g}: direction {claim['direction']} as claimed (no ratio claimed)",
        )
    deviation = observed / claim["ratio"] - 1
    within = abs(deviation) <= claim["tolerance"]
    return ClaimResult(
        label,
        within,
        f"observed ratio {observed:.4g} vs claimed "
        f"{claim['ratio']:.4g} ({deviation:+.1%}, tolerance "
        f"±{claim['tolerance']:.0%})",
    )


def _check_sweep(facts: BundleFacts, finding: Finding) -> tuple[str | None, list[ClaimResult]]:
    """(why the run's sweep is not comparable, or None; the sweep claims' results)."""
    wanted = finding.raw.get("sweep")
    if wanted is None:
        return None, []
    sweep = facts.results.get("sweep")
    blocker = sweep_claims.limits_mismatch(sweep, wanted["limits_bytes"])
    if blocker is not None:
        return blocker, []
    results = []
    for claim in wanted["claims"]:
        holds, reason = sweep_claims.check_claim(sweep or {}, claim)
        results.append(ClaimResult(sweep_claims.claim_label(claim), holds, reason))
    return None, results


def _check_identity(facts: BundleFacts, finding: Finding) -> ClaimResult | None:
    claimed = finding.raw["byte_identity"]["claimed"]
    if claimed is None:
        return None
    observed = facts.byte_identical()
    if observed is None:
        return ClaimResult("byte identity", None, f"{RESULTS_FILE} does not record byte identity")
    word = {True: "identical", False: "different"}
    return ClaimResult(
        "byte identity", observed == claimed, f"outputs {word[observed]}, the evidence says {word[claimed]}"
    )


def compare(bundle: Path, finding: Finding, verification: Verification) -> Comparison:
    """Whether the run bundle reproduces the finding, with the reason for each part.

    verification is verified_input's for the same bundle: only an accepted bundle is read.
    """
    result = Comparison(
        evidence=finding.id, verdict=NOT_COMPARABLE, untrusted_input=verification.untrusted_input
    )
    if not verification.accepted:
        result.reasons.append(
            f"the bundle is {verification.verdict.label}: only a verified, "
            "complete run can reproduce evidence"
        )
        return result
    if finding.status == "plan-unverified" or not (
        finding.raw["claims"] or (finding.raw.get("sweep") or {}).get("claims")
    ):
        result.reasons.append("the evidence is a plan with nothing measured to compare with")
        return result
    facts = BundleFacts.read(bundle)
    blockers, caveats = with_contamination(bundle, facts.results, *_scope_mismatches(facts, finding))
    if blockers:
        result.reasons.extend(blockers)
        return result
    sweep_blocker, sweep_results = _check_sweep(facts, finding)
    if sweep_blocker is not None:
        result.reasons.append(sweep_blocker)
        return result
    result.reasons.extend(caveats)
    result.claims = [_check_claim(facts, c) for c in finding.raw["claims"]] + sweep_results
    identity = _check_identity(facts, finding)
    if identity is not None:
        result.claims.append(identity)
    missing = [c for c in result.claims if c.holds is None]
    if missing:
        result.reasons.extend(c.reason for c in missing)
    elif all(c.holds for c in result.claims):
        result.verdict = REPRODUCED
    else:
        result.verdict = NOT_REPRODUCED
        result.reasons.extend(f"{c.claim}: {c.reason}" for c in result.claims if not c.holds)
    return result


DRAFT_METRICS = ("wall_s", "decode_tps", "prefill_tps")
METRIC_UNITS = {"wall_s": "s", "decode_tps": "tokens/s", "prefill_tps": "tokens/s"}


def _source_text(source: Any) -> str | None:
    if source is None or isinstance(source, str):
        return source
    return json.dumps(source, sort_keys=True)


def _significant(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def draft_finding(
    run_dir: Path,
    finding_id: str,
    title: str,
    summary: str,
    baseline: str = "baseline",
    tolerance: float = 0.25,
    pubkey: Any = None,
    allow_untrusted: bool = False,
) -> dict[str, Any]:
    """A reproduction finding drawn from a verified bundle: medians, ratios against baseline.

    Every scope field comes from the bundle (model manifest, schedule, provenance, results);
    what the bundle does not record is left null and listed under scope.unknown. The caller
    reviews the draft (controlled conditions, descriptions) before adding it to evidence/.
    With allow_untrusted, a bundle whose origin is not trusted is drafted with "untrusted
    input" in its title, summary and scope.not_controlled.
    """
    verification = verified_input(run_dir, pubkey, allow_untrusted)
    if not verification.accepted:
        raise ConfigError(
            f"{run_dir}: the bundle is {verification.verdict.label}: only a "
            "verified, complete run can become evidence (see `appliance bundle "
            "verify`)"
        )
    provenance = _read_mapping(RunDir(run_dir).provenance_file)
    facts = BundleFacts.read(run_dir)
    names = sorted(_obj(facts.results.get("variants")).keys())
    if baseline not in names:
        raise ConfigError(
            f"{run_dir}: {RESULTS_FILE} has no variant {baseline!r} "
            f"(variants: {', '.join(names) or 'none'}); pass --baseline"
        )
    metrics, claims = [], []
    for metric in DRAFT_METRICS:
        values = {v: m for v in names if (m := facts.median(v, metric)) is not None}
        if not values:
            continue
        metrics.append({"name": metric, "unit": METRIC_UNITS[metric], "values": values})
        for variant in names:
            if variant == baseline or variant not in values or not values.get(baseline):
                continue
            ratio = values[variant] / values[baseline]
            if ratio != 1:
                claims.append(
                    {
                        "metric": metric,
                        "baseline": baseline,
                        "treatment": variant,
                        "direction": "lower" if ratio < 1 else "higher",
                        "ratio": _significant(ratio),
                        "tolerance": tolerance,
                    }
                )
    engine = provenance.get("engine") or {}
    upstream = engine.get("upstream") or {}
    host = provenance.get("host") or {}
    gpus = host.get("gpus") or []
    target = facts.profile.get("target")
    scope: dict[str, Any] = {
        "model": {
            "name": Path(str(facts.model.get("file", "model"))).stem,
            "quantization": None,
            "file": facts.model.get("file"),
            "bytes": facts.model.get("bytes"),
            "sha256": facts.model.get("sha256"),
        },
        "engine": {
            "name": "llama.cpp",
            "source": _source_text(engine.get("source")),
            "commit": upstream.get("commit"),
            "release": upstream.get("release"),
            "modification": None,
        },
        "target": target if target in ("cpu", "sm89", "sm120") else None,
        "hardware": {
            "gpu": gpus[0].get("name") if gpus else None,
            "gpu_memory_bytes": gpus[0].get("memory_bytes") if gpus else None,
            "ram_bytes": host.get("ram_bytes"),
        },
        "memory_limit_bytes": facts.memory_limit_bytes,
        "swap_bytes": facts.swap_bytes,
        "n_predict": facts.n_predict,
        "repeats": facts.repeats,
        "statistic": "median",
        "controlled": [],
        "not_controlled": [],
        "unknown": [],
    }
    if verification.untrusted_input:
        title, summary = f"[{UNTRUSTED_INPUT}] {title}", f"[{UNTRUSTED_INPUT}] {summary}"
        scope["not_controlled"].append(f"{UNTRUSTED_INPUT}: {verification.advice}")
    scope["unknown"] = [
        f"scope.{key}: not recorded in the bundle"
        for key in ("memory_limit_bytes", "swap_bytes", "n_predict", "repeats")
        if scope[key] is None
    ]
    sweep = facts.results.get("sweep")
    if isinstance(sweep, dict) and "error" not in sweep:
        # a sweep's overall medians mix its limits: its claims bound the per-limit figures
        metrics, claims = [], []
        scope["memory_limit_bytes"] = None
        scope["unknown"] = [u for u in scope["unknown"] if "memory_limit_bytes" not in u]
    identical = facts.byte_identical()
    raw = {
        "schema_version": 1,
        "id": finding_id,
        "title": title,
        "origin": "reproduction",
        "status": "measured",
        "summary": summary,
        "bundle_digest": verification.bundle_digest,
        "profile": facts.profile.get("name"),
        "scope": scope,
        "variants": {v: f"profile variant {v}" for v in names},
        "metrics": metrics,
        "claims": claims,
        "byte_identity": {
            "claimed": identical,
            "between": names,
            "scope": "generated text at matched length" if identical is not None else "not recorded",
        },
    }
    if isinstance(sweep, dict) and "error" not in sweep:
        raw["sweep"] = sweep_claims.draft_sweep(sweep, baseline, tolerance)
    errors = validate_finding(raw)
    if errors:
        raise ConfigError(f"{run_dir}: the drafted finding is not valid: {errors[0]}")
    return raw
