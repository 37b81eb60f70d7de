"""A run directory as one self-contained HTML page (RUN/report.html): the verification verdict
and signer, the profile and what it reproduces, the run's or sweep's table, the plots, every
trial and where its model lived beside the planner's prediction, the comparison with evidence/
and the provenance summary.

The page fetches nothing: the plots are inlined as `data:` URIs, there is no script, no font
and no link, and its Content-Security-Policy forbids any load but inline images and styles.
Every value from the bundle is HTML-escaped. It is derived from the bundle and says so; it is
not part of the sealed contents (`appliance.runs.run_dir.DERIVED_FILES`).

The caller verifies first (`SealView`): a bundle whose verdict does not allow reading it gets a
page with the refusal and no figure from the bundle at all.
"""

import base64
import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.analysis.run_summary import (
    PLACEMENT_COLUMNS,
    PLACEMENT_TITLE,
    SUMMARY_COLUMNS,
    SUMMARY_TITLE,
    placement_rows,
    planner_verdict_lines,
    ratio_lines,
    summary_rows,
)
from appliance.analysis.sweep_report import (
    CACHE_COLUMNS,
    CACHE_WAIT_COLUMNS,
    CACHE_WAIT_TITLE,
    PREFILL_COLUMNS,
    READS_COLUMNS,
    SPEED_COLUMNS,
    cache_rows,
    cache_title,
    cache_trial_summary,
    cache_wait_rows,
    prefill_rows,
    prefill_title,
    reads_title,
    speed_title,
    sweep_notes,
    sweep_rows,
)
from appliance.core.checks import Check
from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json, load_yaml, read_bytes
from appliance.core.units import format_size
from appliance.runs.memory_points import limit_label
from appliance.runs.records import RunRecord, ScheduledVariant, ScheduleRecord, TrialRecord
from appliance.runs.run_dir import PROFILE_INPUT, PROVENANCE_FILE, RESULTS_FILE, SCHEDULE_INPUT, RunDir
from appliance.runs.timing import TimingRecord, read_timing

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PLOT_BYTES = 8 << 20
SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError, IndexError)

STYLE = """
body { font: 14px/1.45 sans-serif; margin: 1.5em auto; max-width: 1200px; color: #1b1b1b; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; } caption { text-align: left; font-weight: bold; }
th, td { border: 1px solid #c8c8c8; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.92em; word-break: break-all; }
.derived { color: #555; border-left: 4px solid #999; padding-left: 0.6em; }
.verdict { font-size: 1.25em; font-weight: bold; padding: 0.4em 0.6em; }
.verdict.verified { background: #e3f4e3; color: #125c12; }
.verdict.warn { background: #fff3cd; color: #6b4e00; }
.verdict.refused { background: #fbe2e2; color: #8a0f0f; }
.refusal { font-size: 1.2em; font-weight: bold; color: #8a0f0f; border: 3px solid #8a0f0f;
  padding: 0.6em; margin: 0.8em 0; }
.warning { color: #6b4e00; font-weight: bold; } .error { color: #8a0f0f; font-weight: bold; }
.pass { color: #125c12; } .fail { color: #8a0f0f; font-weight: bold; } .warnc { color: #6b4e00; }
figure { display: inline-block; margin: 0.5em; } figure img { max-width: 560px; border: 1px solid #ddd; }
"""


def esc(value: Any) -> str:
    """Any value as escaped HTML text (quotes too, so it is safe inside an attribute)."""
    return html.escape("-" if value is None else str(value), quote=True)


@dataclass(frozen=True)
class SealView:
    """What the verification said, as the page shows it; `readable` is whether the page may
    show anything the bundle holds (verified, accepted by an --allow flag, or incomplete)."""

    verdict: str
    readable: bool
    summary: str  # the verifier's one line: verdict, how accepted, advice
    advice: str  # what the verdict rests on and what to do
    signer: str | None
    bundle_digest: str | None
    verified_utc: str
    checks: list[Check] = field(default_factory=list)
    untrusted_input: bool = False


def _table(
    columns: Iterable[str],
    rows: Iterable[list[Any]],
    caption: str = "",
    row_attrs: Iterable[dict[str, Any]] | None = None,
    table_id: str = "",
) -> str:
    """A table of escaped cells; `row_attrs` gives each row's data-* attributes."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    attrs = list(row_attrs) if row_attrs is not None else None
    body = []
    for index, cells in enumerate(rows):
        extra = "".join(
            f' data-{esc(k)}="{esc(v)}"' for k, v in (attrs[index] if attrs is not None else {}).items()
        )
        body.append(f"<tr{extra}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table{ident}>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _dl(items: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return f"<table>{rows}</table>"


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _read(reader: Callable[[Path], Any], path: Path) -> dict[str, Any]:
    """A record of the bundle through the strict readers; {} when missing or not an object."""
    try:
        return _mapping(reader(path))
    except ConfigError:
        return {}


def _section(ident: str, title: str, body: str) -> str:
    return f'<section id="{esc(ident)}"><h2>{esc(title)}</h2>{body}</section>'


def _unreadable(what: str, exc: BaseException) -> str:
    why = f"{type(exc).__name__} {exc}"
    return f'<p class="error">{esc(what)} could not be read in this version: {esc(why)}</p>'


def _verification(seal: SealView, run_name: str) -> str:
    style = "verified" if seal.verdict == "verified" else ("warn" if seal.readable else "refused")
    parts = [
        f'<p id="verdict" class="verdict {style}" data-verdict="{esc(seal.verdict)}">'
        f"verdict: {esc(seal.verdict.upper())}</p>",
        _dl(
            (
                ("signer (key id)", seal.signer or "none: no trusted signature"),
                ("bundle digest", seal.bundle_digest),
                ("verified at (UTC)", seal.verified_utc),
                ("verified by", "appliance bundle verify's checks and this machine's trust store"),
            )
        ),
        f'<p id="summary">{esc(seal.summary)}</p>',
    ]
    if not seal.readable:
        parts.insert(
            0,
            f'<p id="refusal" class="refusal">REFUSED: bundle {esc(seal.verdict.upper())}: '
            f"{esc(seal.advice)}. No figure of this bundle is shown: nothing in {esc(run_name)} "
            "can be trusted as a result.</p>",
        )
    elif seal.untrusted_input:
        parts.insert(
            0,
            '<p class="refusal">UNTRUSTED INPUT: the contents verify, but no key you trust '
            "signed them; every figure below is as its unknown author wrote it.</p>",
        )
    elif seal.verdict != "verified":
        parts.insert(
            0,
            f'<p class="refusal">{esc(seal.verdict.upper())}: the run did not complete; its '
            "figures are partial and cannot be evidence.</p>",
        )
    status_class = {"pass": "pass", "fail": "fail", "warn": "warnc"}
    rows = "".join(
        f'<tr><td>{esc(c.name)}</td><td class="{status_class.get(c.status.value, "")}">'
        f"{esc(c.status.value)}</td><td>{esc(c.reason)}</td></tr>"
        for c in seal.checks
    )
    parts.append(
        f'<table id="checks"><caption>checks</caption><thead><tr><th>check</th><th>status</th>'
        f"<th>reason</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    return _section("verification", "Verification", "".join(parts))


def _profile(layout: RunDir, run: RunRecord | None, comparisons: list[dict[str, Any]]) -> str:
    profile = _read(load_yaml, layout.input(PROFILE_INPUT))
    try:
        schedule = _schedule(layout)
        schedule_text = (
            "-"
            if schedule is None
            else (
                f"repeats {schedule.repeats}, order {schedule.order}, n_predict {schedule.n_predict}, "
                f"seed {schedule.seed}, cold cache {schedule.cold_cache}, prompt {schedule.prompt!r}"
            )
        )
    except ConfigError as exc:
        schedule_text = f"could not be read in this version: {exc}"
    model = _mapping(profile.get("model"))
    limits = [t.memory_bytes for t in (run.limits.trials if run and run.limits else None) or ()]
    limit_text = ", ".join(_limit(b) for b in limits) or "-"
    reproduces = "; ".join(
        f"{c.get('evidence')}: {c.get('title') or 'not in evidence/'}" for c in comparisons
    )
    body = _dl(
        (
            ("profile", run.profile if run else None),
            ("description", profile.get("description")),
            ("reproduces", reproduces or "no finding in evidence/"),
            ("run status", run.status if run else None),
            ("started / ended (UTC)", f"{run.started_utc} / {run.ended_utc}" if run else "None / None"),
            ("target", run.target if run else None),
            ("memory limits", limit_text),
            ("model file", model.get("file")),
            ("schedule", schedule_text),
        )
    )
    return _section("profile", "Profile", body)


def _limit(value: Any) -> str:
    return limit_label(value) if type(value) is int and value > 0 else "-"


def _results(results: dict[str, Any]) -> str:
    if not results:
        return _section("results", "Results", f'<p class="warning">the run has no {RESULTS_FILE}</p>')
    parts = []
    sweep = results.get("sweep")
    try:
        if isinstance(sweep, dict) and "error" in sweep:
            parts.append(f'<p class="error">sweep analysis: {esc(sweep["error"])}</p>')
        elif isinstance(sweep, dict):
            reads, speed = sweep_rows(sweep)
            attrs = [
                {"limit": row["memory_limit"], "variant": row["variant"]}
                for row in sweep.get("summary") or []
            ]
            parts.append(_table(READS_COLUMNS, reads, reads_title(), attrs, "sweep-reads"))
            parts.append(_table(SPEED_COLUMNS, speed, speed_title(sweep), attrs, "sweep-speed"))
            parts.append(_table(PREFILL_COLUMNS, prefill_rows(sweep), prefill_title(), attrs, "sweep-prompt"))
            cache = sweep.get("expert_cache")
            if cache:
                cache_attrs = [
                    {"limit": row["memory_limit"], "variant": row["variant"]} for row in cache["summary"]
                ]
                parts.append(
                    _table(CACHE_COLUMNS, cache_rows(cache), cache_title(cache), cache_attrs, "expert-cache")
                )
                wait_attrs = [
                    {"limit": row["memory_limit"], "variant": row["variant"]}
                    for row in cache_trial_summary(cache)
                ]
                parts.append(
                    _table(
                        CACHE_WAIT_COLUMNS,
                        cache_wait_rows(cache),
                        CACHE_WAIT_TITLE,
                        wait_attrs,
                        "expert-cache-wait",
                    )
                )
            parts.extend(f'<p class="{esc(sev)}">{esc(text)}</p>' for sev, text in sweep_notes(sweep))
        else:
            variants = list(_mapping(results.get("variants")))
            attrs = [{"variant": name} for name in variants]
            parts.append(_table(SUMMARY_COLUMNS, summary_rows(results), SUMMARY_TITLE, attrs, "variants"))
            parts.extend(f"<p>{esc(line)}</p>" for line in ratio_lines(results))
    except SHAPE_ERRORS as exc:
        parts.append(_unreadable(RESULTS_FILE, exc))
    identity = _mapping(results.get("byte_identity"))
    if identity.get("all_identical") is True:
        parts.append(
            f"<p>generated texts byte-identical at matched length "
            f"({len(identity.get('comparisons') or [])} comparisons)</p>"
        )
    else:
        parts.extend(f'<p class="error">finding: {esc(f)}</p>' for f in identity.get("findings") or [])
    return _section("results", "Results", "".join(parts))


def _placement_section(results: dict[str, Any]) -> str:
    """The engine's placement of every trial beside the planner's peak, and the worst error."""
    rows = placement_rows(results)
    attrs = [{"trial": row[0]} for row in rows]
    lines = planner_verdict_lines(results)
    body = (_table(PLACEMENT_COLUMNS, rows, PLACEMENT_TITLE, attrs, "placement") if rows else "") + "".join(
        f"<p>{esc(line)}</p>" for line in lines
    )
    return _section("placement", "Placement", body or "<p>the run records no placement</p>")


def _plots(layout: RunDir) -> str:
    figures = []
    for path in sorted(layout.plots.glob("*.png")):
        try:
            data = read_bytes(path, MAX_PLOT_BYTES)
        except ConfigError as exc:
            figures.append(f'<p class="warning">{esc(path.name)} left out: {esc(exc)}</p>')
            continue
        if not data.startswith(PNG_SIGNATURE):
            figures.append(f'<p class="warning">{esc(path.name)} left out: not a PNG file</p>')
            continue
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        figures.append(
            f'<figure><img src="{esc(uri)}" alt="{esc(path.stem)}">'
            f"<figcaption>{esc(path.name)}</figcaption></figure>"
        )
    return _section("plots", "Plots", "".join(figures) or "<p>the run has no plots</p>")


def _schedule(layout: RunDir) -> ScheduleRecord | None:
    """inputs/schedule.json, read strictly; None when the run wrote none (a sweep)."""
    path = layout.input(SCHEDULE_INPUT)
    return ScheduleRecord.from_json(load_json(path), str(path)) if path.exists() else None


def _placement(trial: TrialRecord, timing: TimingRecord | None, variants: dict[str, ScheduledVariant]) -> str:
    """Where the engine ran the layers (its backend: the record's, else timing.json's in
    records older than engine_backend) and the variant's environment and arguments, which fix
    the placement in advance."""
    variant = variants.get(trial.variant)
    env = " ".join(f"{k}={v}" for k, v in sorted(variant.env.items())) if variant else ""
    args = " ".join(variant.args) if variant else ""
    extra = " ".join(p for p in (env, args) if p) or "default placement"
    return f"{trial.engine_backend or (timing.backend if timing else None) or '-'}; {extra}"


def _bytes(value: Any, unit: int = 1 << 20) -> str:
    return f"{value / unit:.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _trials(layout: RunDir, run: RunRecord | None) -> str:
    columns = ("trial", "variant", "repeat", "limit", "placement", "peak MiB", "read MiB", "status")
    rows, attrs = [], []
    try:
        schedule = _schedule(layout)
    except ConfigError as exc:
        return _section("trials", "Trials", _unreadable("the schedule", exc))
    variants = {v.name: v for v in schedule.variants} if schedule else {}
    try:
        trials = [
            (t.name, t.record(), t.attached(t.cgroup), read_timing(t.timing)) for t in layout.recorded()
        ]
    except ConfigError as exc:
        return _section("trials", "Trials", _unreadable("a trial record", exc))
    for name, trial, cgroup, timing in trials:
        reads = _mapping(cgroup.get("block_read_bytes")).values()
        read_total = sum(v for v in reads if isinstance(v, int)) if reads else None
        status = str(trial.status)
        if trial.oom_killed is True:
            status += " (OOM-killed)"
        limit = trial.memory_limit
        if limit is None:  # records older than memory_limit: the run's one limit
            limit = run.limits.memory_bytes if run and run.limits else None
        rows.append(
            [
                name,
                trial.variant,
                trial.repeat,
                _limit(limit),
                _placement(trial, timing, variants),
                _bytes(cgroup.get("peak_bytes")),
                _bytes(read_total),
                status,
            ]
        )
        attrs.append({"trial": name, "limit": limit, "status": str(trial.status)})
    body = _table(
        columns,
        rows,
        "each trial: its limit, placement, peak memory, block reads, status",
        attrs,
        "trial-table",
    )
    return _section("trials", "Trials", body if rows else "<p>no trial was recorded</p>")


def _evidence(comparisons: list[dict[str, Any]]) -> str:
    if not comparisons:
        return _section(
            "evidence", "Comparison with evidence/", "<p>the run names no finding in evidence/</p>"
        )
    parts = []
    for item in comparisons:
        claims = [_mapping(c) for c in item.get("claims") or []]
        mark = {True: "holds", False: "FAILS", None: "n/a"}
        rows = [[mark.get(c.get("holds"), "n/a"), c.get("claim"), c.get("reason")] for c in claims]
        reasons = "".join(f"<li>{esc(r)}</li>" for r in item.get("reasons") or [])
        parts.append(
            f'<div class="comparison" data-evidence="{esc(item.get("evidence"))}">'
            f"<p><b>{esc(item.get('evidence'))}</b>: "
            f'<span class="comparison-verdict">{esc(str(item.get("verdict")).upper())}</span>'
            f" ({esc(item.get('input', 'verified input'))})</p>"
            + (_table(("claim", "what", "why"), rows) if rows else "")
            + (f"<ul>{reasons}</ul>" if reasons else "")
            + "</div>"
        )
    return _section("evidence", "Comparison with evidence/", "".join(parts))


def _provenance(layout: RunDir, run: RunRecord | None) -> str:
    provenance = _read(load_json, layout.provenance_file)
    if not provenance:
        missing = f'<p class="warning">the run has no {PROVENANCE_FILE}</p>'
        return _section("provenance", "Provenance", missing)
    engine = _mapping(provenance.get("engine"))
    upstream = _mapping(engine.get("upstream"))
    model = _mapping(provenance.get("model"))
    host = _mapping(provenance.get("host"))
    image = _mapping(provenance.get("image"))
    source = str(engine.get("source") or "-")
    parts = []
    if source.startswith("stand-in"):
        parts.append(
            f'<p id="stand-in" class="warning">STAND-IN: the engine was built from the {esc(source)} '
            f"source, not the canonical pin {esc(upstream.get('release'))} "
            f"(commit {esc(upstream.get('commit'))}).</p>"
        )
    patches = _mapping(engine.get("patches"))
    patch_rows = [
        [kind, _mapping(p).get("file"), _mapping(p).get("sha256")]
        for kind in ("active", "experimental", "rejected")
        for p in patches.get(kind) or []
    ]
    gpus = ", ".join(str(_mapping(g).get("name")) for g in host.get("gpus") or []) or "none"
    parts.append(
        _dl(
            (
                ("image", f"{_mapping(run.engine if run else None).get('image')} ({image.get('id')})"),
                ("engine source", source),
                (
                    "upstream pin",
                    f"{upstream.get('name')} {upstream.get('release')} ({upstream.get('commit')})",
                ),
                ("lock sha256", engine.get("lock_sha256")),
                ("series sha256", engine.get("series_sha256")),
                ("model", f"{model.get('file')}, {model.get('bytes')} bytes"),
                ("model sha256", f"{model.get('sha256')} ({model.get('digest_status')})"),
                (
                    "host",
                    f"{host.get('cpu_model')}, {host.get('cpu_count')} CPUs, "
                    f"{_size(host.get('ram_bytes'))} RAM, swap {_size(host.get('swap_bytes'))}, "
                    f"cgroup v{host.get('cgroup_version')}, kernel {host.get('kernel')}, GPUs {gpus}",
                ),
                ("appliance", provenance.get("appliance_version")),
            )
        )
    )
    parts.append(_table(("series", "patch", "sha256"), patch_rows, "patches", table_id="patches"))
    return _section("provenance", "Provenance", "".join(parts))


def _size(value: Any) -> str:
    return format_size(value, trim=True) if type(value) is int else "-"


def render_report(run_dir: Path, seal: SealView, comparisons: list[dict[str, Any]], made_by: str) -> str:
    """The whole page for run_dir. With `seal.readable` false nothing but the verification is
    read from the bundle (its directory name aside)."""
    layout = RunDir(run_dir)
    name = run_dir.resolve().name
    sections = [_verification(seal, name)]
    if seal.readable:
        run = layout.read_run()
        results = _read(load_json, layout.results_file)
        parts: list[tuple[str, str, Callable[[], str]]] = [
            ("profile", "Profile", lambda: _profile(layout, run, comparisons)),
            ("results", "Results", lambda: _results(results)),
            ("placement", "Placement", lambda: _placement_section(results)),
            ("plots", "Plots", lambda: _plots(layout)),
            ("trials", "Trials", lambda: _trials(layout, run)),
            ("evidence", "Comparison with evidence/", lambda: _evidence(comparisons)),
            ("provenance", "Provenance", lambda: _provenance(layout, run)),
        ]
        for ident, title, build in parts:
            try:
                sections.append(build())
            except SHAPE_ERRORS as exc:  # a signed record of a shape this version does not read
                sections.append(_section(ident, title, _unreadable(f"the {ident} records", exc)))
    derived = (
        f'<p class="derived" id="derived">Derived by {esc(made_by)} at {esc(seal.verified_utc)} '
        "from the run directory; this page is not part of the sealed bundle and nothing in it is "
        f"signed. Check the bundle itself with <code>appliance bundle verify {esc(name)}</code>.</p>"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>run report: {esc(name)}</title><style>{STYLE}</style></head>\n"
        f"<body><h1>Run report: {esc(name)}</h1>{derived}\n" + "\n".join(sections) + "\n</body></html>\n"
    )
