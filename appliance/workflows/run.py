"""Run a profile to a sealed, verified bundle: the chain `appliance run` and every workflow share.

`run_prepared` is the one chain of every run kind once `prepare_run` has checked it: header,
trials, results, the kind's analyses, seal; a `RunKind` says what differs (the analyses, what
runs before the trials, what is printed before them, its own run.json fields).
`execute_profile` is what `appliance run` does after parsing; `appliance.workflows.sweep` is
the other kind. The rest are the steps a new user would otherwise run by hand around it: a
verified source, the engine image, the model, the signing key, bundle verification, the
paging check and the evidence comparison.
"""

import functools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from appliance.analysis.results import analyze_run
from appliance.analysis.run_analyses import write_paging_analysis
from appliance.analysis.run_summary import print_summary
from appliance.analysis.sweep_analysis import probe_summary
from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import existing_default_key
from appliance.attest.trust import init_trusted_keys
from appliance.attest.verify import Verdict, Verification, verify_bundle
from appliance.core.errors import ApplianceError
from appliance.core.progress import ProgressFn
from appliance.core.units import format_size
from appliance.engine.lock import Lock
from appliance.engine.source import fetch_source
from appliance.evidence.compare import REPRODUCED, compare_with_evidence
from appliance.evidence.finding import current_ids
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.build import build_image
from appliance.models.full_synth import DEFAULT_ROUTER, synthesize_like
from appliance.models.shapes import spec_from_synth
from appliance.models.skeleton import input_path
from appliance.models.synth import synthesize
from appliance.runs.execute import RunOutcome, execute_run
from appliance.runs.executor import ExecutorFactory
from appliance.runs.model_files import make_routes
from appliance.runs.plan import LlamaMoeTraceEngine, trial_plan
from appliance.runs.prepare import PreparedRun, RunRequest, prepare_run
from appliance.runs.preview import print_header, print_stand_in
from appliance.runs.profile import Profile
from appliance.runs.records import Placement, RunSetup, SweepRecord
from appliance.runs.run_dir import RunDir
from appliance.runs.timing import TimingRecord
from appliance.runs.trial import RunContext
from appliance.runs.trial_time import ASSUMED_READ_BPS, SAFETY_FACTOR, model_trial_timeout_s
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


@dataclass(frozen=True)
class RunOptions:
    """How a prepared run's trials run and how it is sealed: the same for every run kind."""

    key: Path | None = None  # the signing key (None: the default key, made when missing)
    unsigned: bool = False
    trial_timeout: float | None = None
    executor: ExecutorFactory | None = None  # None: here; else e.g. a Ray cluster
    resume: bool = False


@dataclass(frozen=True)
class RunKind:
    """What a kind of run (`appliance run`, `appliance sweep`) adds to the one chain."""

    analyze: Callable[[Path], object]  # writes its analyses into the run directory before the seal
    announce: Callable[[Console], None] | None = None  # printed after the header (a sweep's grid)
    before_trials: Callable[[RunContext], None] | None = None  # run first (a sweep's disk probe)
    sweep: SweepRecord | None = None  # its own field of run.json (a sweep's limits)


def run_prepared(
    prepared: PreparedRun,
    client: Any,
    lock: Lock,
    console: Console,
    kind: RunKind,
    options: RunOptions,
) -> RunOutcome:
    """The one chain of every run kind after `prepare_run`: the header, the trials (here or
    through `executor`, e.g. a cluster), the run's results and plots, the kind's analyses, the
    seal (signed with `signing_key`). With resume, only the trials the run directory lacks."""
    print_header(console, prepared)
    executor = options.executor
    trial_executor = executor(prepared, lock, console) if executor is not None else None
    stand_in = print_stand_in(console, prepared, lock)
    if kind.announce is not None:
        kind.announce(console)
    timeout = options.trial_timeout
    if timeout is None:
        probe = RunDir(prepared.run_dir).read_probe() if options.resume else None
        timeout = derived_trial_timeout(prepared, probe, console)
    ctx = RunContext(
        client,
        prepared.profile,
        LlamaMoeTraceEngine(prepared.image),
        prepared.model,
        prepared.settings,
        prepared.run_dir,
        secrets.token_hex(6),
        console,
        trial_timeout_s=timeout,
    )
    signer = signing_key(options.key, options.unsigned, console)
    seal = functools.partial(finalize_bundle, key=signer, docker_client=client)

    def finalize(run_dir: Path) -> None:
        kind.analyze(run_dir)
        seal(run_dir)

    return execute_run(
        ctx,
        prepared.trials,
        lock.raw,
        RunSetup(
            target=prepared.choice.target,
            stand_in=stand_in,
            image_id=client.images.get(prepared.image).id,
            placement=Placement(
                mode=prepared.profile.placement.label,
                vram_budget_bytes=prepared.profile.limits.vram,
                gpu=prepared.gpu.record() if prepared.gpu is not None else None,
                warnings=prepared.warnings,
            ),
            sweep=kind.sweep,
        ),
        finalize=finalize,
        analyze=functools.partial(analyze_run, profile=prepared.profile, model_path=prepared.model.path),
        before_trials=kind.before_trials,
        executor=trial_executor,
        resume=options.resume,
        verify_resume=resume_verifier(signer),
    )


def timeout_read_bps(probe: TimingRecord | None) -> float | None:
    """The read rate a trial's timeout assumes: the disk probe's QD1 rate for page-size reads,
    its slowest, since a demand-paged engine (MADV_RANDOM) reads one page per fault; None
    without a probe."""
    return probe_summary(probe)["page_qd1_bytes_per_s"] if probe is not None else None


def derived_trial_timeout(prepared: PreparedRun, probe: TimingRecord | None, console: Console) -> float:
    """Every trial's timeout when --trial-timeout is not given: from the model's size and the
    disk probe's QD1 rate for page-size reads (appliance.runs.trial_time), said on the console."""
    rate = timeout_read_bps(probe)
    timeout = model_trial_timeout_s(prepared.model.path, prepared.profile.schedule, rate)
    basis = (
        f"the disk probe's {rate / 2**20:.0f} MiB/s (4 KiB reads, QD1)"
        if rate
        else f"an assumed {ASSUMED_READ_BPS >> 20} MiB/s (no disk probe)"
    )
    console.print(
        f"trial timeout: {timeout:.0f} s (the model's size and its tokens' experts read at {basis}, "
        f"x{SAFETY_FACTOR:g}; --trial-timeout sets another)"
    )
    return timeout


def execute_profile(
    profile: Profile,
    models_dir: Path,
    lock: Lock,
    console: Console,
    *,
    image: str | None = None,
    out: Path | None = None,
    repeats: int | None = None,
    options: RunOptions = RunOptions(),
    skip_digest: bool = False,
    gpu_index: int | None = None,
    progress: ProgressFn | None = None,
) -> RunOutcome:
    """Run every trial of profile (here, or through `executor`, e.g. a cluster) and seal the
    run directory as a (signed) bundle; with resume, only the trials `out` still lacks."""
    request = RunRequest(
        trial_plan(profile, repeats),
        out=out,
        skip_digest=skip_digest,
        image=image,
        gpu_index=gpu_index,
        resume=options.resume,
    )
    prepared, client = prepare_run(profile, models_dir, lock, request, docker_client, progress)
    kind = RunKind(
        analyze=functools.partial(write_paging_analysis, model_path=prepared.model.path, profile=profile)
    )
    outcome = run_prepared(prepared, client, lock, console, kind, options)
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
    lock: Lock,
    target: str,
    source: str,
    console: Console,
    progress: ProgressFn | None = None,
    experimental: tuple[str, ...] = (),
) -> str:
    with_patches = f" with experimental {', '.join(experimental)}" if experimental else ""
    console.print(
        f"engine image for [bold]{target}[/bold] from source [bold]{source}[/bold]{with_patches} "
        "(a first build compiles llama.cpp: 3 to 15 minutes on 2 cores, by load)"
    )
    built = build_image(lock, target, source, experimental, progress=progress)
    state = "reused (inputs unchanged)" if built.reused else f"built in {built.seconds:.0f} s"
    console.print(f"image {built.tag} {state}")
    if L.cuda_summary(built.labels):
        console.print(f"[bold yellow]{L.cuda_summary(built.labels)}[/bold yellow]")
    return built.tag


def obtain_engine_image(
    lock: Lock,
    target: str,
    source: str,
    console: Console,
    progress: ProgressFn | None = None,
    experimental: tuple[str, ...] = (),
) -> str:
    """The target's engine image: pulled when the lock records a published one (and the source is
    `auto`, with no experimental patches) and it checks out, else built; says which, and why."""
    if source == "auto" and not experimental and target in lock.published_images:
        from appliance.release.published import pull_published

        started = time.monotonic()
        try:
            report = pull_published(lock, target)
        except ApplianceError as exc:
            console.print(
                f"[yellow]published {target} image not pulled ({exc}): building it instead[/yellow]"
            )
        else:
            console.print(
                f"engine image {report.ref} pulled in {time.monotonic() - started:.0f} s: the lock's "
                "published digest, its signed record verified (no build)"
            )
            return report.ref
    elif source == "auto" and not experimental:
        console.print(f"the lock records no published {target} image: building it")
    return ensure_engine_image(
        lock, target, choose_source(lock, source, console), console, progress, experimental
    )


def ensure_synth_model(
    profile: Profile, models_dir: Path, console: Console, progress: ProgressFn | None = None
) -> Path:
    """Synthesize the profile's model into models_dir unless it is there already: a tiny one
    (model.synth's arch, size, ...) or a full-shape one (model.synth.like, `model synth --like`);
    and make its routes file (`routes:`) from the route trace in the checkout when missing."""
    synth = profile.model.synth
    path = models_dir / profile.model.file
    if profile.routes is not None:
        models_dir.mkdir(parents=True, exist_ok=True)
        made = make_routes(profile.routes, models_dir)
        if made is not None:
            console.print(
                f"routes {made.name} made from {profile.routes.origin} (sha256 {profile.routes.sha256})"
            )
    if path.exists() or not synth:
        return path
    models_dir.mkdir(parents=True, exist_ok=True)
    like = profile.model.like
    if like is not None:
        seed, skew = int(synth.get("seed", 0)), float(synth.get("skew", 1.0))
        layers = int(synth["layers"]) if "layers" in synth else None
        used = int(synth["used"]) if "used" in synth else None
        router_design = str(synth.get("router", DEFAULT_ROUTER))
        console.print(
            f"synthesizing {path.name} like {like} ({router_design} router, skew {skew:g}, seed {seed}"
            f"{'' if layers is None else f', first {layers} layers'}"
            f"{'' if used is None else f', {used} experts per token'}): "
            f"{_expected(profile)} written once, in one streaming pass"
        )
        full = synthesize_like(
            input_path(like),
            path,
            seed=seed,
            skew=skew,
            layers=layers,
            progress=progress,
            used=used,
            router_design=router_design,
        )
        console.print(f"model {path.name}: {full.size_bytes} bytes, sha256 {full.sha256}")
        return path
    spec = spec_from_synth(synth)
    console.print(
        f"synthesizing {path.name} ({synth['size']}, {synth['arch']}, "
        f"skew {synth['skew']}, seed {synth['seed']})"
    )
    result = synthesize(spec, path, progress)
    console.print(f"model {path.name}: {result.size_bytes} bytes, sha256 {result.sha256}")
    return path


def _expected(profile: Profile) -> str:
    size = profile.model.bytes
    return "a file of unpinned size" if size is None else f"{format_size(size)} ({size} bytes)"


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
    (default: the profile's findings, a superseded one replaced by its successor)."""
    pubkey = None
    if key is not None:
        pubkey = signing_public_key(key)
    verification = verify_bundle(outcome.run_dir, pubkey)
    console.print(f"bundle verification: {verification.summary()}", markup=False, soft_wrap=True)
    comparisons = compare_with_evidence(
        outcome.run_dir, verification, current_ids(profile.evidence) if evidence is None else evidence
    )
    return PipelineReport(outcome.run_dir, verification, comparisons)


def print_report(report: PipelineReport, console: Console) -> None:
    if report.paging:
        table = Table(title="bytes read per cold trial vs an LRU replay of its own trace")
        for column in (
            "trial",
            "measured MiB",
            "LRU-predicted MiB",
            "ratio",
            "expert budget MiB",
            "distinct experts",
        ):
            table.add_column(column)
        for row in report.paging:
            table.add_row(
                str(row["trial"]),
                f"{row['measured_read_bytes'] / 2**20:.1f}",
                f"{row['predicted_read_bytes'] / 2**20:.1f}",
                f"{row['ratio']:.2f}",
                f"{row['budget_bytes'] / 2**20:.1f}",
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
