"""The finding model: one evidence file, valid against appliance/schemas/finding.schema.json
(spec in docs/evidence.md) and the rules a schema cannot say (a current finding's sweep claims
can each fail: appliance.evidence.sweep_claims.empty_claim), read strictly
(appliance.core.strict_load); loading evidence/ (where every superseded finding's successor must
exist and be current), finding one by id, and the current finding for each id a profile names.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.paths import evidence_dir
from appliance.core.strict_load import load_json
from appliance.core.validation import load_schema as load_named_schema
from appliance.core.validation import raise_for, schema_errors
from appliance.evidence.sweep_claims import empty_claim

SCHEMA_NAME = "finding"
MAX_FINDING_BYTES = 256 << 10  # published findings are under 4 KiB
RATIO_CONSISTENCY = 1e-3
SUPERSEDED = "superseded"


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
    def superseded_by(self) -> str | None:
        """The id of the finding that replaces this one, or None while it is current."""
        successor = self.raw.get("superseded_by")
        return None if successor is None else str(successor)

    @property
    def superseded_note(self) -> str:
        """One line: `superseded by ID: why; why`."""
        return f"superseded by {self.superseded_by}: {'; '.join(self.raw['superseded_because'])}"

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


def _supersession_problems(raw: dict[str, Any]) -> list[str]:
    if raw["status"] != SUPERSEDED:
        return [
            f"/{key}: only a finding with status {SUPERSEDED!r} has {key}"
            for key in ("superseded_by", "superseded_because")
            if key in raw
        ]
    problems = []
    if "superseded_by" not in raw:
        problems.append("/superseded_by: a superseded finding must name the finding that replaces it")
    elif raw["superseded_by"] == raw["id"]:
        problems.append("/superseded_by: a finding cannot supersede itself")
    if "superseded_because" not in raw:
        problems.append("/superseded_because: a superseded finding must say why")
    return problems


def _empty_claim_problems(raw: dict[str, Any]) -> list[str]:
    """A current finding's sweep claims must each be able to fail for a reason of the run's own
    (`sweep_claims.empty_claim`); a superseded finding keeps what it claimed (it is never
    compared)."""
    if raw["status"] == SUPERSEDED:
        return []
    return [
        f"/sweep/claims/{index}: {reason}: remove the claim or bound what the run measured"
        for index, claim in enumerate((raw.get("sweep") or {}).get("claims", []))
        if (reason := empty_claim(claim)) is not None
    ]


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
    errors += _supersession_problems(raw)
    variants = set(raw["variants"])
    for index, metric in enumerate(raw["metrics"]):
        unknown = set(metric["values"]) - variants
        if unknown:
            errors.append(f"/metrics/{index}/values: values for unknown variants {sorted(unknown)}")
    return errors + _ratio_problems(raw) + _empty_claim_problems(raw)


def load_finding(path: Path, schema: dict[str, Any] | None = None) -> Finding:
    raw = load_json(path, MAX_FINDING_BYTES)
    errors = validate_finding(raw, schema)
    if errors:
        raise_for(path, errors)
    if raw["id"] != path.stem:
        raise ConfigError(f"{path}: /id: {raw['id']!r} must equal the file name {path.stem!r}")
    return Finding(id=raw["id"], path=path, raw=raw)


def _successor_problem(finding: Finding, findings: dict[str, Finding]) -> str | None:
    successor = finding.superseded_by
    if successor is None:
        return None
    if successor not in findings:
        return (
            f"/superseded_by: no finding {successor!r} in {finding.path.parent}: "
            "add it first or name one that exists"
        )
    later = findings[successor].superseded_by
    if later is not None:
        return f"/superseded_by: {successor!r} is itself superseded by {later!r}: name the current finding"
    return None


def load_findings(directory: Path | None = None) -> list[Finding]:
    """Every finding in directory (default evidence/), each valid, and every superseded one's
    successor present there and not itself superseded."""
    directory = directory or evidence_dir()
    findings = [load_finding(p) for p in sorted(directory.glob("*.json"))]
    by_id = {f.id: f for f in findings}
    for finding in findings:
        problem = _successor_problem(finding, by_id)
        if problem is not None:
            raise ConfigError(f"{finding.path}: {problem}")
    return findings


def find_finding(finding_id: str, directory: Path | None = None) -> Finding:
    findings = {f.id: f for f in load_findings(directory)}
    if finding_id not in findings:
        raise ConfigError(
            f"no evidence {finding_id!r}: `appliance evidence list` shows {', '.join(sorted(findings))}"
        )
    return findings[finding_id]


def current_ids(ids: Iterable[str], directory: Path | None = None) -> list[str]:
    """The ids with each superseded finding replaced by its successor (one step: a successor
    is never superseded), each id once, in order. Ids not in evidence/, and all of them when
    evidence/ does not load, are kept as given: comparing them says why."""
    try:
        findings = {f.id: f for f in load_findings(directory)}
    except ConfigError:
        findings = {}
    current: list[str] = []
    for finding_id in ids:
        found = findings.get(finding_id)
        wanted = (found.superseded_by if found is not None else None) or finding_id
        if wanted not in current:
            current.append(wanted)
    return current
