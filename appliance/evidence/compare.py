"""Whether a verified run bundle reproduces a finding (`compare`): the scope must match (model
file, GPU, memory limit, tokens), then every claim must hold (same direction, ratio
treatment/baseline within the stated tolerance) and byte identity must be what the finding
says. The verdict is reproduced, not reproduced or not comparable, with the reasons; a superseded
finding is never reproduced (not comparable: superseded by its successor, with why).
"""

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from appliance.attest.verify import Verification
from appliance.core.errors import ApplianceError
from appliance.evidence import sweep_claims
from appliance.evidence.bundle_facts import UNTRUSTED_INPUT, BundleFacts
from appliance.evidence.contamination import with_contamination
from appliance.evidence.finding import Finding, find_finding
from appliance.runs.run_dir import RESULTS_FILE

REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE = "reproduced", "not reproduced", "not comparable"


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
    if finding.superseded_by is not None:
        result.reasons.append(finding.superseded_note)
        return result
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


def compare_with_evidence(
    run_dir: Path, verification: Verification, evidence: Iterable[str]
) -> list[dict[str, Any]]:
    """The bundle compared with each finding (`Comparison.as_dict()` plus the finding's
    `title`); a finding missing from evidence/ is not comparable, with the reason, and so is
    a superseded one named here (automatic lists come through `current_ids`, which names its
    successor instead)."""
    comparisons: list[dict[str, Any]] = []
    for finding_id in evidence:
        try:
            finding = find_finding(finding_id)
        except ApplianceError as exc:
            comparisons.append({"evidence": finding_id, "verdict": NOT_COMPARABLE, "reasons": [str(exc)]})
            continue
        comparisons.append(
            compare(run_dir, finding, verification).as_dict() | {"title": finding.raw["title"]}
        )
    return comparisons
