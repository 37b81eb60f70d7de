"""Fixtures for end-to-end tests: the patched llama.cpp built once per session."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.attest.dsse import PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, KeyPair
from appliance.core.errors import ApplianceError
from appliance.core.paths import cache_dir
from appliance.engine.local_build import build_source
from appliance.engine.lock import load_lock
from appliance.engine.source import fetch_source
from tests.conftest import REPO, unavailable
from tests.engine_image import engine_image_cpu, engine_image_cpu_cache  # noqa: F401 - fixtures, used by name


@pytest.fixture(scope="session")
def engine_bin() -> Path:
    """bin/ of the patched b10229 stand-in, built locally (cached under APPLIANCE_CACHE).

    APPLIANCE_ENGINE_BIN names an existing build of the patched tree instead (it must hold
    llama-moe-trace); a failed build fails the tests that need it.
    """
    override = os.environ.get("APPLIANCE_ENGINE_BIN")
    if override:
        if not (Path(override) / "llama-moe-trace").is_file():
            pytest.fail(f"APPLIANCE_ENGINE_BIN={override} has no llama-moe-trace")
        return Path(override)
    return locally_built("b10229")


def locally_built(stand_in: str, experimental: tuple[str, ...] = ()) -> Path:
    """bin/ of a stand-in with the series (on its track) and `experimental` patches, built on
    the host (cached under APPLIANCE_CACHE); a failed build fails the test that needs it."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        unavailable("a local engine build needs cmake and ninja")
    lock = load_lock()
    try:
        source = fetch_source(lock, stand_in)
    except ApplianceError as exc:
        unavailable(f"the {stand_in} stand-in source is not available: {exc}")
        raise
    try:
        bin_dir, _ = build_source(lock, source, experimental)
    except ApplianceError as exc:
        pytest.fail(f"local engine build of {stand_in} {' '.join(experimental)} failed: {exc}")
    return bin_dir


CACHE_PATCH = "0004-expert-cache.patch"


@pytest.fixture(scope="session")
def cache_bin() -> Path:
    """bin/ of b10229 with the active series and 0004, built locally (cached); or
    APPLIANCE_ENGINE_BIN when that build has --expert-cache."""
    override = os.environ.get("APPLIANCE_ENGINE_BIN")
    if override:
        tool = Path(override) / "llama-moe-trace"
        helped = (
            subprocess.run([str(tool), "--help"], capture_output=True, text=True) if tool.is_file() else None
        )
        if helped is None or "--expert-cache" not in helped.stderr:
            pytest.fail(
                f"APPLIANCE_ENGINE_BIN={override} has no llama-moe-trace with --expert-cache ({CACHE_PATCH})"
            )
        return Path(override)
    return locally_built("b10229", (CACHE_PATCH,))


@dataclass(frozen=True)
class TracerRun:
    result: subprocess.CompletedProcess[bytes]
    trace: Path
    timings_path: Path
    text_path: Path

    @property
    def timings(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.timings_path.read_text())
        return value

    @property
    def text(self) -> bytes:
        return self.text_path.read_bytes()


def tracer_command(bin_dir: Path, model: Path, out: Path, *args: str, prompt: str) -> list[str]:
    """llama-moe-trace writing into `out` (trace.moetrace, timings.json, text.txt), 2 threads."""
    return [
        str(bin_dir / "llama-moe-trace"),
        "-m",
        str(model),
        "-p",
        prompt,
        "-t",
        "2",
        "-o",
        str(out / "trace.moetrace"),
        "--timings",
        str(out / "timings.json"),
        "--text",
        str(out / "text.txt"),
        *args,
    ]


def run_tracer(
    bin_dir: Path,
    model: Path,
    out: Path,
    *args: str,
    prompt: str,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> TracerRun:
    """Run llama-moe-trace into `out` (trace.moetrace, timings.json, text.txt), 2 threads."""
    out.mkdir(parents=True, exist_ok=True)
    run = TracerRun(
        subprocess.run(
            tracer_command(bin_dir, model, out, *args, prompt=prompt),
            capture_output=True,
            timeout=600,
            env={**os.environ, **(env or {})},
        ),
        out / "trace.moetrace",
        out / "timings.json",
        out / "text.txt",
    )
    if check:
        assert run.result.returncode == 0, run.result.stderr.decode(errors="replace")[-2000:]
    return run


def demo_model(profile: str) -> Path:
    """A demo profile's model in the cache, synthesized on first use."""
    from rich.console import Console

    from appliance.runs.profile import load_profile
    from appliance.workflows.run import ensure_synth_model

    return ensure_synth_model(load_profile(profile), cache_dir() / "models" / "demo", Console(quiet=True))


def private_demo_model(profile: str, tmp: Path) -> Path:
    """tmp/models holding a private copy of a demo profile's model: another process reading the
    shared copy would put its pages back in the page cache between a trial's eviction and its
    start."""
    shared = demo_model(profile)
    models = tmp / "models"
    models.mkdir()
    shutil.copyfile(shared, models / shared.name)
    return models


def models_dir_with(model: Path, tmp: Path) -> Path:
    """tmp/models holding `model`, hard-linked where the filesystem allows, else copied: the
    directory is mounted read-only into a trial's container, so no symlink may lead out of it."""
    models = tmp / "models"
    models.mkdir()
    try:
        os.link(model, models / model.name)
    except OSError:
        shutil.copyfile(model, models / model.name)
    return models


def user_env(tmp: Path) -> dict[str, str]:
    """A newcomer's machine: no signing key, an empty trust store, a fresh home (the cache
    stays where it is, so the engine image and the model are reused)."""
    return {
        "HOME": str(tmp / "home"),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "APPLIANCE_TRUSTED_KEYS": str(tmp / "trusted-keys"),
        "APPLIANCE_CACHE": str(cache_dir()),
    }


def make(target: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a Makefile target with the test's interpreter as the venv (nothing is installed)."""
    venv = Path(sys.executable).parent.parent
    env = dict(os.environ, PYTHONPATH=str(REPO), **user_env(tmp))
    return subprocess.run(
        ["make", "-o", "venv", target, f"VENV={venv}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )


@dataclass(frozen=True)
class DemoRun:
    """One `make demo` on a machine with no key: its output, bundle, user and the key it made."""

    result: subprocess.CompletedProcess[str]
    run: Path
    home: Path
    env: dict[str, str]

    @property
    def key(self) -> KeyPair:
        keys = self.home / "config" / "appliance" / "keys"
        keyid = json.loads((keys / PUBLIC_KEY_FILE).read_text())["keyid"]
        return KeyPair(keys / PRIVATE_KEY_FILE, keys / PUBLIC_KEY_FILE, keyid)


@pytest.fixture(scope="session")
def demo_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`make demo` once per session: the genuine bundle the demo and attestation tests read."""
    request.getfixturevalue("engine_image_cpu")  # built (or reused) first, failing under CI
    home = tmp_path_factory.mktemp("newcomer")
    run = home / "demo"
    # a private model copy: another process reading the shared cache's copy would put its
    # pages back in the page cache between eviction and a trial's start
    result = make("demo", home, f"DEMO_ARGS=--out {run} --models {home / 'models'}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return DemoRun(result, run, home, user_env(home))
