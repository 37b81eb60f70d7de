"""Drafting a finding from a sealed bundle (`appliance.evidence.draft`, `appliance evidence
draft`)."""

import json
import os
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.evidence.compare import REPRODUCED
from appliance.evidence.draft import draft_finding
from appliance.evidence.finding import load_finding
from tests.conftest import run_cli
from tests.fake_run import MODEL
from tests.unit.evidence.test_compare import as_finding, compared, key, pair, sealed_run

__all__ = ["key", "pair"]  # fixtures


def test_draft_from_a_bundle_reproduces_itself(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key)
    raw = draft_finding(run, "tiny-oversub-demand-mmap", "tiny oversub", "miniature")
    manifest = json.loads((run / "manifest.json").read_text())
    assert raw["bundle_digest"] == manifest["bundle_digest"]
    assert raw["scope"]["model"]["sha256"] == MODEL["sha256"]
    assert raw["scope"]["engine"]["source"] == "stand-in b10229"
    assert raw["scope"]["memory_limit_bytes"] == 209715200
    assert raw["scope"]["swap_bytes"] == 0 and raw["scope"]["repeats"] == 3
    assert raw["scope"]["unknown"] == []
    assert [(c["metric"], c["direction"], c["ratio"]) for c in raw["claims"]] == [
        ("wall_s", "lower", 0.25),
        ("decode_tps", "higher", 4.0),
        ("prefill_tps", "lower", 0.8),
    ]
    assert raw["byte_identity"]["claimed"] is True
    assert compared(run, as_finding(raw)).verdict == REPRODUCED


def test_draft_refuses_an_incomplete_run(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path, key, status="incomplete")
    with pytest.raises(ConfigError, match="the bundle is incomplete"):
        draft_finding(run, "x", "x", "x")


def test_cli_draft_writes_a_loadable_finding(tmp_path: Path, key: Path) -> None:
    run = sealed_run(tmp_path / "run", key)
    out = tmp_path / "ev" / "tiny-oversub-demand-mmap.json"
    out.parent.mkdir()
    env = {"APPLIANCE_TRUSTED_KEYS": os.environ["APPLIANCE_TRUSTED_KEYS"]}
    run_cli(
        "evidence",
        "draft",
        str(run),
        "--id",
        out.stem,
        "--title",
        "tiny",
        "--out",
        str(out),
        env=env,
        check=True,
    )
    assert load_finding(out).raw["origin"] == "reproduction"
    again = run_cli(
        "evidence", "draft", str(run), "--id", out.stem, "--title", "tiny", "--out", str(out), env=env
    )
    assert again.returncode == 1 and "exists" in again.stderr
