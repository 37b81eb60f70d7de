"""CLI: `appliance evidence`."""

from pathlib import Path

import click

from appliance.cli.options import OutputPath, finite, json_option, strict_json, verify_key_option
from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.evidence.bundle_facts import UNTRUSTED_INPUT, claimed_evidence, verified_input
from appliance.evidence.compare import REPRODUCED, Comparison, compare
from appliance.evidence.draft import draft_finding
from appliance.evidence.finding import find_finding, load_findings

allow_untrusted_option = click.option(
    "--allow-untrusted",
    is_flag=True,
    help="Read a bundle that is unsigned or signed by a key you do not trust; every line of "
    'the result says "untrusted input".',
)


@click.group("evidence")
def evidence_group() -> None:
    """Published results and comparison of new runs against them."""


@evidence_group.command("list")
@json_option
def evidence_list(as_json: bool) -> None:
    """Every finding in evidence/, with its status (and successor, when superseded) and the
    profile that reproduces it."""
    findings = load_findings()
    if as_json:
        click.echo(
            strict_json(
                [
                    {
                        "id": f.id,
                        "origin": f.raw["origin"],
                        "status": f.status,
                        "superseded_by": f.superseded_by,
                        "profile": f.raw["profile"],
                        "title": f.raw["title"],
                    }
                    for f in findings
                ],
                indent=2,
            )
        )
        return
    width = max(len(f.id) for f in findings)
    for f in findings:
        click.echo(
            f"{f.id:<{width}}  {f.raw['origin']:<12} {f.status:<15} "
            f"{f.raw['profile'] or '-':<14} {f.raw['title']}"
            + (f" ({f.superseded_note})" if f.superseded_by else "")
        )


@evidence_group.command("show")
@click.argument("finding_id")
@json_option
def evidence_show(finding_id: str, as_json: bool) -> None:
    """One finding: numbers, claims and exact scope."""
    finding = find_finding(finding_id)
    if as_json:
        click.echo(strict_json(finding.raw, indent=2))
        return
    raw, scope = finding.raw, finding.scope
    click.echo(f"{raw['title']}\n{raw['origin']}, {raw['status']}")
    if finding.superseded_by:
        click.echo(finding.superseded_note)
    click.echo(f"\n{raw['summary']}\n")
    for metric in raw["metrics"]:
        values = ", ".join(f"{k} {v}" for k, v in metric["values"].items())
        click.echo(f"{metric['name']} ({metric['unit']}): {values}")
    for claim in raw["claims"]:
        ratio = (
            "direction only"
            if claim["ratio"] is None
            else f"ratio {claim['ratio']} ±{claim['tolerance']:.0%}"
        )
        click.echo(
            f"claim: {claim['metric']} {claim['treatment']} {claim['direction']} than "
            f"{claim['baseline']} ({ratio})"
        )
    model = scope["model"]
    click.echo(
        f"\nmodel: {model['name']} file {model['file']} bytes {model['bytes']} sha256 {model['sha256']}"
    )
    click.echo(
        f"limit: {scope['memory_limit_bytes']} bytes, swap {scope['swap_bytes']}; "
        f"tokens {scope['n_predict']}; repeats {scope['repeats']}"
    )
    for key in ("controlled", "not_controlled", "unknown"):
        for item in scope[key]:
            click.echo(f"{key.replace('_', ' ')}: {item}")


def print_comparison(result: Comparison) -> None:
    mark_input = f"[{UNTRUSTED_INPUT}] " if result.untrusted_input else ""
    click.echo(f"{mark_input}{result.evidence}: {result.verdict.upper()}")
    for claim in result.claims:
        mark = {True: "holds", False: "FAILS", None: "n/a"}[claim.holds]
        click.echo(f"{mark_input}  {mark:<6} {claim.claim}: {claim.reason}")
    for reason in result.reasons:
        click.echo(f"{mark_input}  why: {reason}")


@evidence_group.command("compare")
@click.argument("bundle", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--evidence",
    "ids",
    multiple=True,
    help="Evidence id to compare with (default: those the run's profile names).",
)
@verify_key_option("the bundle")
@allow_untrusted_option
@json_option
def evidence_compare(
    bundle: Path, ids: tuple[str, ...], key: Path | None, allow_untrusted: bool, as_json: bool
) -> None:
    """Whether a run bundle reproduces the evidence it claims to (after full verification)."""
    verification = verified_input(bundle, key, allow_untrusted)
    wanted = list(ids) or claimed_evidence(bundle)
    if not wanted:
        raise ApplianceError(
            "the run's profile names no evidence: pass --evidence ID (see `appliance evidence list`)"
        )
    results = [compare(bundle, find_finding(i), verification) for i in wanted]
    if as_json:
        click.echo(strict_json([r.as_dict() for r in results], indent=2))
    else:
        for result in results:
            print_comparison(result)
    missed = [r.evidence for r in results if r.verdict != REPRODUCED]
    mark_input = f"[{UNTRUSTED_INPUT}] " if verification.untrusted_input else ""
    if missed:
        raise ApplianceError(
            f"{mark_input}{len(missed)} of {len(results)} not reproduced or "
            f"not comparable: {', '.join(missed)}"
        )


@evidence_group.command("draft")
@click.argument("bundle", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--id", "finding_id", required=True, help="Id of the new finding (file name).")
@click.option("--title", required=True, help="One-line title.")
@click.option("--summary", default=None, help="What was found (default: the title).")
@click.option(
    "--baseline", default="baseline", show_default=True, help="Variant the ratios are taken against."
)
@click.option(
    "--tolerance",
    type=finite(min=0),
    default=0.25,
    show_default=True,
    help="Relative tolerance a later reproduction's ratios must hold.",
)
@verify_key_option("the bundle")
@allow_untrusted_option
@click.option("--out", type=OutputPath(), default=None, help="Write the finding here (default: print it).")
def evidence_draft(
    bundle: Path,
    finding_id: str,
    title: str,
    summary: str | None,
    baseline: str,
    tolerance: float,
    key: Path | None,
    allow_untrusted: bool,
    out: Path | None,
) -> None:
    """Draft a reproduction finding from a verified bundle, for review before committing."""
    raw = draft_finding(
        bundle, finding_id, title, summary or title, baseline, tolerance, key, allow_untrusted
    )
    text = strict_json(raw, indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    if out.exists():
        raise ApplianceError(f"{out} exists: choose another --out or remove it first")
    atomic.write_text(out, text)
    mark_input = f"[{UNTRUSTED_INPUT}] " if UNTRUSTED_INPUT in raw["title"] else ""
    click.echo(f"{mark_input}wrote {out}: review scope.controlled and the variant descriptions")


COMMANDS: list[click.Command] = [evidence_group]
