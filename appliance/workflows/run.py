"""Run a profile to a sealed, verified bundle: the chain `appliance run` and every workflow share.

`execute_profile` is what `appliance run` does after parsing. The rest are the steps a new
user would otherwise run by hand around it: a verified source, the engine image, the model,
the signing key, bundle verification, the paging check and the evidence comparison.
"""

import functools
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.analysis.report import print_summary
from appliance.analysis.results import analyze_run
from appliance.analysis.stats import trial_metrics
from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import existing_default_key
from appliance.attest.trust import init_trusted_keys
from appliance.attest.verify import Verdict, Verification, verify_bundle
from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.core.progress import ProgressFn
from appliance.core.strict_load import load_json
from appliance.core.units import parse_size
from appliance.engine.lock import Lock
from appliance.engine.source import fetch_source
from appliance.evidence.findings import NOT_COMPARABLE, REPRODUCED, compare, find_finding
from appliance.host.docker import docker_client
from appliance.images.build import build_image
from appliance.models.shapes import ModelSynthSpec
from appliance.models.synth import synthesize
from appliance.runs.execute import RunOutcome, execute_run
from appliance.runs.executor import ExecutorFactory
from appliance.runs.plan import LlamaMoeTraceEngine, trial_plan
from appliance.runs.prepare import prepare_run
from appliance.runs.profile import Profile
from appliance.runs.report import print_header, print_stand_in
from appliance.runs.run_dir import RunDir
from appliance.runs.trial import RunContext
from appliance.workflows.resume_check import resume_verifier, signing_public_key

FALLBACK_STAND_IN = "b10229"


def signing_key(key: Path | None, unsigned: bool, console: Console) -> Path | None:
    """The key to sign with: --key, else the user's default key, made (and trusted) with
    `appliance keys init` on first use; none only when unsigned is asked for."""
    if unsigned:
        return None
    if key is not None:
        return key
    existing = existing_default_key()
    if existing is not None:
        return existing
    pair, trusted = init_trusted_keys()
    console.print(
        f"no signing key yet: made one as `appliance keys init` does.\n"
        f"  private key {pair.private} (keep it; never commit it)\n"
        f"  public key  {pair.public}, key id {pair.keyid}\n"
        f"  trusted on this machine through {trusted}; others trust your bundles "
        "with `appliance keys trust` on that public key file",
        soft_wrap=True,
    )
    return pair.private.parent


def execute_profile(
    profile: Profile,
    models_dir: Path,
    lock: Lock,
    console: Console,
    *,
    image: str | None = None,
    out: Path | None = None,
    repeats: int | None = None,
    key: Path | None = None,
    unsigned: bool = False,
    trial_timeout: float | None = None,
    skip_digest: bool = False,
    gpu_index: int | None = None,
    progress: ProgressFn | None = None,
    executor: ExecutorFactory | None = None,
    resume: bool = False,
) -> RunOutcome:
    """Run every trial of profile (here, or through `executor`, e.g. a cluster) and seal the
    run directory as a (signed) bundle; with resume, only the trials `out` still lacks."""
    prepared, client = prepare_run(
        profile,
        models_dir,
        lock,
        trials=trial_plan(profile, repeats),
        out=out,
        dry_run=False,
        skip_digest=skip_digest,
        image=image,
        gpu_index=gpu_index,
        client_factory=docker_client,
        progress=progress,
        resume=resume,
    )
    print_header(console, prepared)
    trial_executor = executor(prepared, lock, console) if executor is not None else None
    stand_in = print_stand_in(console, prepared, lock)
    ctx = RunContext(
        client,
        profile,
        LlamaMoeTraceEngine(prepared.image),
        prepared.model,
        prepared.settings,
        prepared.run_dir,
        secrets.token_hex(6),
        console,
        trial_timeout_s=trial_timeout,
    )
    signer = signing_key(key, unsigned, console)
    seal = functools.partial(finalize_bundle, key=signer, docker_client=client)

    def finalize(run_dir: Path) -> None:
        write_paging_analysis(run_dir, prepared.model.path, profile)
        seal(run_dir)

    outcome = execute_run(
        ctx,
        prepared.trials,
        lock.raw,
        {
            "target": prepared.choice.target,
            "stand_in": stand_in,
            "image_id": client.images.get(prepared.image).id,
        },
        finalize=finalize,
        analyze=functools.partial(analyze_run, profile=profile),
        executor=trial_executor,
        resume=resume,
        verify_resume=resume_verifier(signer),
    )
    print_summary(console, outcome.results, outcome.run_dir, outcome.status, outcome.plots)
    return outcome


def choose_source(lock: Lock, requested: str, console: Console) -> str:
    """`auto`: the canonical pin when reachable, else the b10229 stand-in, said loudly."""
    if requested != "auto":
        return requested
    try:
        fetch_source(lock, "canonical")
        return "canonical"
    except ApplianceError as exc:
        console.print(
            f"[bold yellow]canonical source not available ({exc}).\n"
            f"BUILDING FROM THE {FALLBACK_STAND_IN} STAND-IN (llama.cpp release "
            f"{lock.stand_ins[FALLBACK_STAND_IN].release}), NOT THE CANONICAL PIN "
            f"{lock.upstream.release}; every label and bundle says so.[/bold yellow]"
        )
        return FALLBACK_STAND_IN


def ensure_engine_image(
    lock: Lock, target: str, source: str, console: Console, progress: ProgressFn | None = None
) -> str:
    console.print(
        f"engine image for [bold]{target}[/bold] from source [bold]{source}[/bold] "
        "(a first build compiles llama.cpp: 3 to 15 minutes on 2 cores, by load)"
    )
    built = build_image(lock, target, source, progress=progress)
    state = "reused (inputs unchanged)" if built.reused else f"built in {built.seconds:.0f} s"
    console.print(f"image {built.tag} {state}")
    return built.tag


def ensure_synth_model(
    profile: Profile, models_dir: Path, console: Console, progress: ProgressFn | None = None
) -> Path:
    """Synthesize the profile's model into models_dir unless it is there already."""
    synth = profile.model.synth
    path = models_dir / profile.model.file
    if path.exists() or not synth:
        return path
    spec = ModelSynthSpec(
        arch=str(synth["arch"]),
        size_bytes=parse_size(str(synth["size"])),
        experts=int(synth["experts"]),
        used=int(synth["used"]),
        layers=int(synth["layers"]),
        skew=float(synth["skew"]),
        seed=int(synth["seed"]),
        expert_type=str(synth.get("type", "f16")),
    )
    console.print(
        f"synthesizing {path.name} ({synth['size']}, {synth['arch']}, "
        f"skew {synth['skew']}, seed {synth['seed']})"
    )
    models_dir.mkdir(parents=True, exist_ok=True)
    result = synthesize(spec, path, progress)
    console.print(f"model {path.name}: {result.size_bytes} bytes, sha256 {result.sha256}")
    return path


def paging_rows(run_dir: Path, model_path: Path, memory_limit: int, n_predict: int) -> list[dict[str, Any]]:
    """Per trial with a trace and a block-read count: bytes read against the LRU prediction."""
    from appliance.analysis.capacity import anon_bytes
    from appliance.analysis.paging import (  # numba loads only for this analysis
        predicted_cold_read,
        run_trial_contamination,
    )

    rows = []
    layout = RunDir(run_dir)
    for trial in layout.load_trials():
        trace = layout.trial(trial["dir"]).trace
        measured = trial_metrics(trial, n_predict)["block_read_bytes"]
        if not trace.exists() or not measured:
            continue
        prediction = predicted_cold_read(trace, model_path, memory_limit, anon_bytes(trial))
        rows.append(
            {
                "trial": trial["dir"],
                "variant": trial["variant"],
                "measured_read_bytes": int(measured),
                **prediction,
                "ratio": measured / prediction["predicted_read_bytes"],
                "contamination": run_trial_contamination(trial, trace, model_path),
            }
        )
    return rows


def write_paging_analysis(run_dir: Path, model_path: Path, profile: Profile) -> None:
    """analysis/paging.json, inside the bundle: measured reads against the LRU prediction."""
    if not profile.trace or not profile.schedule.cold_cache:
        return
    try:
        rows: Any = paging_rows(run_dir, model_path, profile.limits.memory, profile.schedule.n_predict)
    except ApplianceError as exc:  # an analysis that cannot run must not block the seal
        rows = {"error": str(exc)}
    atomic.write_json(RunDir(run_dir).paging_analysis, {"lru_prediction": rows})


@dataclass
class PipelineReport:
    run_dir: Path
    verification: Verification
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    paging: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        """The bundle verified and every finding it names was reproduced."""
        return self.verification.verdict is Verdict.VERIFIED and all(
            c["verdict"] == REPRODUCED for c in self.comparisons
        )


def verify_and_compare(
    outcome: RunOutcome,
    profile: Profile,
    key: Path | None,
    console: Console,
    evidence: list[str] | None = None,
) -> PipelineReport:
    """Verify the bundle against the key that signed it, then compare it with `evidence`
    (default: the profile's findings)."""
    pubkey = None
    if key is not None:
        pubkey = signing_public_key(key)
    verification = verify_bundle(outcome.run_dir, pubkey)
    report = PipelineReport(outcome.run_dir, verification)
    console.print(f"bundle verification: {verification.summary()}", markup=False, soft_wrap=True)
    for finding_id in profile.evidence if evidence is None else evidence:
        try:
            finding = find_finding(finding_id)
        except ApplianceError as exc:
            report.comparisons.append(
                {"evidence": finding_id, "verdict": NOT_COMPARABLE, "reasons": [str(exc)]}
            )
            continue
        report.comparisons.append(compare(outcome.run_dir, finding, verification).as_dict())
    return report


def read_paging_analysis(run_dir: Path) -> list[dict[str, Any]]:
    path = RunDir(run_dir).paging_analysis
    if not path.exists():
        return []
    record = load_json(path)
    rows = record.get("lru_prediction") if isinstance(record, dict) else None
    return rows if isinstance(rows, list) else []


def print_report(report: PipelineReport, console: Console) -> None:
    if report.paging:
        table = Table(title="bytes read per cold trial vs an LRU replay of its own trace")
        for column in (
            "trial",
            "measured MiB",
            "LRU-predicted MiB",
            "ratio",
            "capacity (experts)",
            "distinct experts",
        ):
            table.add_column(column)
        for row in report.paging:
            table.add_row(
                str(row["trial"]),
                f"{row['measured_read_bytes'] / 2**20:.1f}",
                f"{row['predicted_read_bytes'] / 2**20:.1f}",
                f"{row['ratio']:.2f}",
                str(row["capacity_experts"]),
                str(row["distinct_experts"]),
            )
        console.print(table)
    if report.comparisons:
        table = Table(title="comparison with evidence/")
        for column in ("evidence", "verdict", "why"):
            table.add_column(column)
        for item in report.comparisons:
            table.add_row(item["evidence"], item["verdict"], "; ".join(item.get("reasons") or []))
        console.print(table)
    console.print(f"bundle: {report.run_dir}  (verify: appliance bundle verify {report.run_dir})")
