"""`appliance report` as a user runs it: the page's path, --json, --open, the exit status of a
refused bundle, and bad input refused in one line with nothing written."""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from appliance.attest.dsse import KeyPair, init_keys
from appliance.attest.trust import trust_key
from appliance.attest.verify import Verdict
from tests.conftest import run_cli
from tests.tamper import snapshot
from tests.unit.analysis.test_html_report import sealed_run


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A sealed fake run and the environment that trusts its signer."""
    root = tmp_path_factory.mktemp("report-cli")
    signer: KeyPair = init_keys(root / "keys")
    env = {"APPLIANCE_TRUSTED_KEYS": str(root / "trusted-keys")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_TRUSTED_KEYS", env["APPLIANCE_TRUSTED_KEYS"])
        trust_key(signer.public)
    return sealed_run(root, signer), env


def test_report_writes_the_page_and_says_where(sealed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    run, env = sealed
    out = tmp_path / "page.html"
    result = run_cli("report", str(run), "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"report: {out}"
    assert result.stdout.splitlines()[1].startswith("bundle verification: verdict: VERIFIED")
    assert out.read_text().startswith("<!DOCTYPE html>")
    as_json = run_cli("report", str(run), "--out", str(out), "--json", env=env)
    record = json.loads(as_json.stdout)
    assert record["report"] == str(out) and record["verdict"] == "verified" and record["figures_shown"]


def test_open_hands_the_page_to_the_browser(sealed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    run, env = sealed
    seen = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {seen}\n')
    browser.chmod(0o755)
    out = tmp_path / "page.html"
    result = run_cli("report", str(run), "--out", str(out), "--open", env={**env, "BROWSER": str(browser)})
    assert result.returncode == 0, result.stderr
    assert seen.read_text() == out.as_uri()


def test_a_tampered_bundle_exits_with_its_verdict_after_writing_the_refusal(
    sealed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    run, env = sealed
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "run.json").write_text((copy / "run.json").read_text().replace("complete", "complete "))
    result = run_cli("report", str(copy), env=env)
    assert result.returncode == Verdict.TAMPERED.exit_code
    assert result.stdout.splitlines()[0] == f"report: {copy / 'report.html'}"
    assert result.stderr.strip() == ("error: bundle tampered: the report shows the refusal and no figure")
    assert (
        "REFUSED: bundle TAMPERED: failed file-digests, manifest-matches-statement, run-status"
        in (copy / "report.html").read_text()
    )


def refused(args: list[str], env: dict[str, str], watched: Path) -> str:
    before = snapshot(watched)
    result = run_cli("report", *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert snapshot(watched) == before  # nothing written, nothing half-written
    return result.stderr.strip()


def test_bad_input_is_one_line_and_writes_nothing(
    sealed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    run, env = sealed
    plain = tmp_path / "not-a-run"
    plain.mkdir()
    (plain / "notes.txt").write_text("hello")
    assert refused([str(plain)], env, tmp_path) == (
        f"error: {plain}: not a run directory (no run.json or manifest.json): give a directory "
        "`appliance run` or `sweep` wrote"
    )
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    assert refused([str(run), "--out", str(fifo)], env, tmp_path) == (
        f"error: {fifo} is a FIFO, not a regular file: choose a file path for --out"
    )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert refused([str(run), "--out", str(directory)], env, tmp_path) == (
        f"error: {directory} is a directory, not a regular file; choose a file path for --out"
    )
    missing = tmp_path / "no" / "such" / "dir" / "page.html"
    assert refused([str(run), "--out", str(missing)], env, tmp_path) == (
        f"error: {missing}: its directory {missing.parent} does not exist: create it or choose another --out"
    )
    assert not (tmp_path / "no").exists()
    inside = run / "trials" / "page.html"
    assert refused([str(run), "--out", str(inside)], env, run) == (
        f"error: {inside} is inside the run directory: the page goes to {run / 'report.html'} there "
        "(any other file would make the bundle fail verification), or give --out outside it"
    )
