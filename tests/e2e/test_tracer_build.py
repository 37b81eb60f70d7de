"""`appliance engine build --local`: the patched tree's binaries, cached and recorded."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli.engine_build import build
from appliance.core.digests import sha256_file
from appliance.engine.lock import load_lock
from appliance.engine.patches import series_digest
from appliance.engine.tools import LOCAL_TOOLS

SYSTEM_LIBS = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"}


@pytest.mark.engine
def test_local_build_reports_its_cached_binaries(engine_bin: Path) -> None:
    if os.environ.get("APPLIANCE_ENGINE_BIN"):
        pytest.fail("this test checks the build itself: unset APPLIANCE_ENGINE_BIN")
    result = CliRunner().invoke(build, ["--local", "--source", "b10229", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert Path(record["bin_dir"]) == engine_bin
    assert record["series_digest"] == series_digest(load_lock())
    assert record["source"]["kind"] == "stand-in" and record["source"]["name"] == "b10229"
    assert "-DLLAMA_BUILD_NUMBER=10229" in record["cmake_args"]
    assert sorted(record["binaries"]) == sorted(LOCAL_TOOLS)
    for name, digest in record["binaries"].items():
        assert sha256_file(engine_bin / name) == digest
    helped = subprocess.run([str(engine_bin / "llama-moe-trace"), "--help"], capture_output=True)
    assert helped.returncode == 0 and b"--no-trace" in helped.stderr
    for name in LOCAL_TOOLS:  # llama.cpp and ggml linked in: only the C/C++ runtime is shared
        ldd = subprocess.run(["ldd", str(engine_bin / name)], capture_output=True, text=True)
        libs = {line.split()[0] for line in ldd.stdout.splitlines() if "=>" in line}
        assert libs <= SYSTEM_LIBS, f"{name} needs {sorted(libs - SYSTEM_LIBS)}"

    refused = CliRunner().invoke(build, ["--source", "b10229"])
    assert refused.exit_code != 0 and "only --local builds" in str(refused.exception)
