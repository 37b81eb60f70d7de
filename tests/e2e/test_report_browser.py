"""The demo's HTML report in a real browser (headless Chromium over the DevTools protocol): it
shows the verdict, every memory limit and every variant's decode figure, asks for nothing over
the network and logs no error; a tampered copy's report shows the refusal and no figure."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.verify import Verdict
from appliance.runs.memory_points import limit_label
from tests.browser import Rendered, render
from tests.conftest import run_cli
from tests.e2e.conftest import DemoRun

# what the test reads from the rendered DOM (evaluated through the DevTools protocol: the
# page itself runs no script)
QUERY = """JSON.stringify({
  verdict: document.getElementById('verdict')?.dataset.verdict ?? null,
  verdictText: document.getElementById('verdict')?.textContent ?? null,
  refusal: document.getElementById('refusal')?.textContent ?? null,
  images: [...document.images].map(i => ({src: i.src.slice(0, 22), width: i.naturalWidth})),
  speedHeader: [...document.querySelectorAll('#sweep-speed th')].map(th => th.textContent),
  speed: [...document.querySelectorAll('#sweep-speed tbody tr')].map(tr => ({
    limit: tr.dataset.limit, variant: tr.dataset.variant,
    cells: [...tr.cells].map(td => td.textContent)})),
  trials: [...document.querySelectorAll('#trial-table tbody tr')].map(tr => ({
    trial: tr.dataset.trial, limit: tr.dataset.limit, cells: [...tr.cells].map(td => td.textContent)})),
  figures: document.querySelectorAll('[data-limit], figure').length,
  text: document.body.innerText,
})"""


def rendered(page: Path) -> tuple[Rendered, dict[str, Any]]:
    result = render(page, QUERY)
    assert result.network_requests() == [], result.network_requests()
    assert result.errors == [], result.errors
    assert result.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    return result, json.loads(result.query)


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_the_demo_report_shows_every_figure_and_needs_no_network(demo_run: DemoRun, tmp_path: Path) -> None:
    run = demo_run.run
    page = run / "report.html"
    assert f"report: {page}" in demo_run.result.stdout  # `make demo` says where it is
    result, dom = rendered(page)
    (tmp_path / "report.png").write_bytes(result.screenshot)
    assert dom["verdict"] == "verified" and dom["verdictText"] == "verdict: VERIFIED"
    assert dom["refusal"] is None

    plots = sorted((run / "plots").glob("*.png"))
    assert len(dom["images"]) == len(plots) == 5
    assert all(i["src"] == "data:image/png;base64," and i["width"] > 0 for i in dom["images"])  # decoded

    results = json.loads((run / "results.json").read_text())
    summary = results["sweep"]["summary"]
    tps = dom["speedHeader"].index("tok/s")
    shown = {(row["limit"], row["variant"]): row["cells"] for row in dom["speed"]}
    assert len(shown) == len(summary) == 9
    for row in summary:  # every variant's decode figure at every limit
        cells = shown[(str(row["memory_limit"]), row["variant"])]
        assert cells[0] == limit_label(row["memory_limit"])
        assert cells[tps] == f"{row['decode_tps']:.2f}", (row, cells)

    records = [json.loads(p.read_text()) for p in sorted(run.glob("trials/*/trial.json"))]
    assert [(t["trial"], t["limit"]) for t in dom["trials"]] == [
        (r["name"], str(r["memory_limit"])) for r in records
    ]
    for limit in results["sweep"]["limits"]:  # every limit, by bytes and as its label
        assert any(t["limit"] == str(limit) and limit_label(limit) in t["cells"] for t in dom["trials"])
    assert "STAND-IN" in dom["text"] and "not part of the sealed bundle" in dom["text"]

    # the page is derived: the bundle still verifies with it in place
    verified = run_cli("bundle", "verify", str(run), env=demo_run.env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.docker
@pytest.mark.engine
@pytest.mark.slow
def test_a_tampered_demo_bundle_reports_the_refusal_not_a_figure(demo_run: DemoRun, tmp_path: Path) -> None:
    copy = tmp_path / "tampered"
    shutil.copytree(demo_run.run, copy)
    (copy / "report.html").unlink()
    timing = sorted(copy.glob("trials/*/timing.json"))[0]
    record = json.loads(timing.read_text())
    record["decode_tokens_per_s"] = 4242.4242
    timing.write_text(json.dumps(record))

    made = run_cli("report", str(copy), env=demo_run.env)
    assert made.returncode == Verdict.TAMPERED.exit_code, made.stdout + made.stderr
    result, dom = rendered(copy / "report.html")
    assert dom["verdict"] == "tampered"
    assert dom["refusal"].startswith("REFUSED: bundle TAMPERED: failed file-digests")
    assert dom["images"] == [] and dom["speed"] == [] and dom["trials"] == [] and dom["figures"] == 0
    assert "4242" not in dom["text"]


def test_the_browser_check_sees_a_page_that_would_load_something(tmp_path: Path) -> None:
    """Not vacuous: an image from the network is reported (refused by the policy, it is a
    console error; without the policy, a request)."""
    with_policy = tmp_path / "with-policy.html"
    with_policy.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        'content="default-src \'none\'"></head><body><img src="http://127.0.0.1:9/x.png"></body></html>'
    )
    seen = render(with_policy, "1")
    assert any("Content Security Policy" in e for e in seen.errors), seen.console
    without = tmp_path / "without-policy.html"
    without.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    assert render(without, "1").network_requests() == ["http://127.0.0.1:9/x.png"]
