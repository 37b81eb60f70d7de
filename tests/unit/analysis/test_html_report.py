"""The HTML report of a run: one file that loads nothing, every value escaped, the verdict
re-checked when it is made, and a tampered bundle's page with the refusal and no figure."""

import json
import re
import shutil
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from appliance.analysis import plots, stats
from appliance.analysis.html_report import CSP, SealView, esc, render_report
from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import KeyPair, init_keys
from appliance.attest.trust import trust_key
from appliance.attest.verify import Verdict, verify_bundle
from appliance.core.checks import Check, Status
from appliance.workflows.report_page import make_report
from tests.fake_run import make_run

HOSTILE = "<img src=x onerror=alert(1)>\"'&"
HOSTILE_DESCRIPTION = "</td></table><script>alert('x')</script><a href=http://127.0.0.1:9/>x</a>"
URL = re.compile(r"(https?|ftp|wss?|file):|//[a-z0-9]", re.IGNORECASE)  # anything fetchable
INLINE_PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class Page(HTMLParser):
    """Every start tag with its attributes, the text, and the text under each id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.by_id: dict[str, list[str]] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in ("img", "meta", "br"):
            self._open.append((tag, dict(attrs).get("id")))
            ident = dict(attrs).get("id")
            if ident:
                self.by_id[ident] = []

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for _, ident in self._open:
            if ident:
                self.by_id[ident].append(data)

    def under(self, ident: str) -> str:
        return "".join(self.by_id[ident])

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return init_keys(tmp_path_factory.mktemp("keys") / "k")


@pytest.fixture
def trusted(tmp_path: Path, signer: KeyPair, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "trusted-keys"
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(store))
    trust_key(signer.public)
    return store


def sealed_run(
    root: Path, signer: KeyPair, hostile: bool = False, placement: dict[str, Any] | None = None
) -> Path:
    """A fake run whose results and plots the real analysis computed, sealed by `signer`;
    hostile: a variant name and the profile's description are markup."""
    run = make_run(root)
    variants = ["baseline", "demand-mmap"]
    if hostile:
        for record in run.glob("trials/*/trial.json"):
            trial = json.loads(record.read_text())
            if trial["variant"] == "demand-mmap":
                record.write_text(json.dumps({**trial, "variant": HOSTILE}))
        schedule = json.loads((run / "inputs" / "schedule.json").read_text())
        schedule["variants"][1]["name"] = HOSTILE
        (run / "inputs" / "schedule.json").write_text(json.dumps(schedule))
        profile = run / "inputs" / "profile.yaml"
        profile.write_text(profile.read_text() + f"description: {json.dumps(HOSTILE_DESCRIPTION)}\n")
        variants[1] = HOSTILE
    (run / "plots" / "decode_tps.png").unlink()
    results = stats.summarize(run, variants, 32)
    if placement is not None:
        results["placement"] = placement
    (run / "results.json").write_text(json.dumps(results))
    plots.write_plots(run, results, 209715200)
    finalize_bundle(run, signer.private)
    return run


def test_a_verified_run_has_every_part_and_loads_nothing(
    tmp_path: Path, signer: KeyPair, trusted: Path
) -> None:
    run = sealed_run(tmp_path, signer)
    outcome = make_report(run, now=NOW)
    assert outcome.path == run / "report.html" and outcome.readable
    text = outcome.path.read_text()
    page = Page(text)
    csp = [m for m in page.named("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert (
        [m["content"] for m in csp]
        == [CSP]
        == ["default-src 'none'; img-src data:; style-src 'unsafe-inline'"]
    )
    assert "<script" not in text.lower() and not URL.search(INLINE_PNG.sub("", text))
    assert {tag for tag, _ in page.tags} & {
        "script",
        "link",
        "a",
        "iframe",
        "object",
        "embed",
        "base",
    } == set()
    images = page.named("img")
    assert len(images) == len(list((run / "plots").glob("*.png"))) == 2
    assert all(str(i["src"]).startswith("data:image/png;base64,") for i in images)
    assert page.under("verdict") == "verdict: VERIFIED"
    assert f"{signer.keyid}" in page.under("verification")
    assert "2026-12-01T12:00:00Z" in page.under("verification")
    assert "not part of the sealed bundle" in page.under("derived")
    for section in ("profile", "results", "plots", "trials", "evidence", "provenance"):
        assert section in page.by_id, section
    # the per-variant table holds the medians the terminal prints: decode tok/s 2,4,6 and 3,5,7
    assert "4.00 [2.00-6.00]" in page.under("variants") and "5.00 [3.00-7.00]" in page.under("variants")
    trials = page.under("trial-table")
    assert trials.count("200MiB") == 6 and "190.7" in trials  # each trial's limit and peak MiB
    assert "STAND-IN" in page.under("provenance")
    # the page is derived: the bundle verifies with it in place, and nothing sealed changed
    assert verify_bundle(run).verdict is Verdict.VERIFIED


def test_every_value_is_escaped(tmp_path: Path, signer: KeyPair, trusted: Path) -> None:
    run = sealed_run(tmp_path, signer, hostile=True)
    text = make_report(run, now=NOW).path.read_text()
    page = Page(text)
    assert "<script" not in text.lower()
    assert {tag for tag, _ in page.tags} & {"script", "a"} == set()
    assert [name for _, attrs in page.tags for name in attrs if name.startswith("on")] == []
    assert all(str(i["src"]).startswith("data:image/png;base64,") for i in page.named("img"))
    assert esc(HOSTILE) in text and HOSTILE not in text
    assert HOSTILE_DESCRIPTION in page.under("profile")  # shown as text, not markup
    assert HOSTILE in page.under("variants") and HOSTILE in page.under("trial-table")


def test_the_builder_escapes_what_the_verifier_says_too(tmp_path: Path) -> None:
    seal = SealView(
        verdict="tampered",
        readable=False,
        summary=f"verdict: TAMPERED: failed subjects-cover-files: added: {HOSTILE}",
        advice=f"failed subjects-cover-files: added: {HOSTILE}",
        signer=None,
        bundle_digest=None,
        verified_utc="2026-12-01T12:00:00Z",
        checks=[Check("subjects-cover-files", Status.FAIL, f"added: {HOSTILE}")],
    )
    text = render_report(tmp_path, seal, [], "appliance test")
    assert HOSTILE not in text and text.count(esc(HOSTILE)) == 3  # refusal, summary, the check
    assert not Page(text).named("img")


def test_a_tampered_bundle_gets_the_refusal_and_no_figure(
    tmp_path: Path, signer: KeyPair, trusted: Path
) -> None:
    run = sealed_run(tmp_path, signer)
    timing = next(run.glob("trials/*/timing.json"))
    timing.write_text(json.dumps({"decode_tokens_per_s": 987.654}))
    outcome = make_report(run, now=NOW)
    assert not outcome.readable and outcome.verification.verdict is Verdict.TAMPERED
    text = outcome.path.read_text()
    page = Page(text)
    assert page.under("refusal").startswith("REFUSED: bundle TAMPERED: failed file-digests")
    assert "file-digests" in page.under("refusal")
    assert page.under("verdict") == "verdict: TAMPERED"
    assert not page.named("img") and "987" not in text
    assert set(page.by_id) >= {"verification", "refusal"}
    assert not {"results", "plots", "trials", "profile", "provenance", "evidence"} & set(page.by_id)


def test_an_unsigned_bundle_is_refused_unless_allowed(tmp_path: Path, signer: KeyPair, trusted: Path) -> None:
    run = sealed_run(tmp_path, signer)
    finalize_bundle(run, None)
    refused = make_report(run, now=NOW)
    assert not refused.readable and refused.verification.verdict is Verdict.UNSIGNED
    assert not Page(refused.path.read_text()).named("img")
    allowed = make_report(run, allow_untrusted=True, now=NOW)
    page = Page(allowed.path.read_text())
    assert allowed.readable and len(page.named("img")) == 2
    assert "UNTRUSTED INPUT" in page.under("verification")


def test_a_report_html_that_is_a_link_is_a_file_the_bundle_does_not_seal(
    tmp_path: Path, signer: KeyPair, trusted: Path
) -> None:
    run = sealed_run(tmp_path, signer)
    make_report(run, now=NOW)
    assert verify_bundle(run).verdict is Verdict.VERIFIED
    report = run / "report.html"
    shutil.move(report, tmp_path / "elsewhere.html")
    report.symlink_to(tmp_path / "elsewhere.html")
    result = verify_bundle(run)
    assert result.verdict is Verdict.TAMPERED
    assert "report.html (symbolic link)" in {c.name: c.reason for c in result.checks}["plain-files"]


def test_records_of_an_odd_shape_leave_their_section_unreadable_not_a_traceback(tmp_path: Path) -> None:
    """A bundle signed by a trusted key may still hold records this version cannot read."""
    run = make_run(tmp_path)
    schedule = json.loads((run / "inputs" / "schedule.json").read_text())
    schedule["variants"] = [{"name": "baseline", "args": 5}]
    (run / "inputs" / "schedule.json").write_text(json.dumps(schedule))
    (run / "provenance.json").write_text(
        json.dumps({"engine": {"patches": {"active": 3}}, "host": {"gpus": 7}})
    )
    (run / "results.json").write_text(json.dumps({"variants": {"baseline": {"counts": 1}}}))
    seal = SealView(
        "verified", True, "verdict: VERIFIED", "every check passed", "k", "d", "2026-12-01T12:00:00Z"
    )
    page = Page(render_report(run, seal, [], "appliance test"))
    for section in ("trials", "provenance", "results"):
        assert "could not be read in this version" in page.under(section), section
    assert "tiny-oversub" in page.under("profile")


def test_the_placement_section_sets_each_trial_beside_the_planner(
    tmp_path: Path, signer: KeyPair, trusted: Path
) -> None:
    mib = 1 << 20
    row = {
        "trial": "008-477.6MiB-demand-mmap-r1",
        "variant": "demand-mmap",
        "layers_offloaded": 0,
        "engine_buffers": {"CPU_Mapped": 398 * mib},
        "kv_cache_bytes": {"CPU": mib // 2},
        "compute_bytes": {"CPU": 2 * mib},
        "planner_peak_bytes": 2374 * mib // 10,
        "planner_peak_pages": "the chosen experts' pages (route trace)",
        "measured_peak_bytes": 2290 * mib // 10,
        "error_pct": {"model_cpu": 0.0, "peak": 3.742},
    }
    placement = {
        "goal_pct": 5.0,
        "trials": [row],
        "worst": {"trial": row["trial"], "figure": "peak", "pct": 3.742},
        "undecided": [],
        "within_goal": True,
    }
    page = Page(make_report(sealed_run(tmp_path, signer, placement=placement), now=NOW).path.read_text())
    table = page.under("placement")
    for cell in ("008-477.6MiB-demand-mmap-r1", "CPU_Mapped 398.0 MiB", "237.4", "229.0", "+3.74"):
        assert cell in table, cell
    assert "route trace" in table and "UNDER" not in table
    assert "worst peak +3.74% (008-477.6MiB-demand-mmap-r1); within the goal of 5%" in page.under("placement")
