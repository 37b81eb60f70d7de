import json
import re
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.core.paths import default_lock_path
from appliance.engine.lock import load_lock, lock_digest
from tests.conftest import lock_with, run_cli


def test_repository_lock_loads_with_the_canonical_pin() -> None:
    lock = load_lock()
    assert lock.upstream.commit == "b2f221684fcd898e947a121baeda80f345da3e6b"
    assert lock.upstream.release == "b10189"
    assert lock.stand_ins["b10068"].sdist_sha256.startswith("70309c58")
    assert lock.stand_ins["b10229"].sdist_sha256.startswith("d2924b89")
    assert set(lock.targets) == {"cpu", "sm89", "sm120"}
    assert lock.targets["sm120"].cuda is not None
    assert lock.targets["sm120"].cuda.architectures == "120a-real;90-virtual"
    assert lock.targets["sm120"].cuda.sass == ("120a",) and lock.targets["sm120"].cuda.ptx == ("90",)


def test_digest_ignores_formatting_but_not_content(tmp_path: Path) -> None:
    raw = json.loads(default_lock_path().read_text())
    reformatted = tmp_path / "lock.json"
    reformatted.write_text(json.dumps(raw, indent=7, sort_keys=True))
    assert load_lock(reformatted).digest == load_lock().digest
    raw["upstream"]["release"] = "b10190"
    assert lock_digest(raw) != load_lock().digest


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["upstream"].pop("commit"), "/upstream/commit: missing field"),
        (
            lambda r: r["stand_ins"]["b10229"].update(sdist_sha256="ABC"),
            "/stand_ins/b10229/sdist_sha256: 'ABC' is not a lowercase 64-hex-digit sha256",
        ),
        (lambda r: r["upstream"].update(commit="1234"), "/upstream/commit"),
        (
            lambda r: r["targets"]["cpu"].update(cmake_args="x"),
            "/targets/cpu/cmake_args: expected array, got string",
        ),
        (lambda r: r.update(schema_version=9), "/schema_version: unsupported version 9"),
    ],
)
def test_malformed_lock_names_file_and_field(tmp_path: Path, edit, field: str) -> None:  # type: ignore[no-untyped-def]
    path = lock_with(tmp_path, edit)
    with pytest.raises(ConfigError, match=re.escape(field)) as info:
        load_lock(path)
    assert field in str(info.value)
    assert str(path) in str(info.value)


def test_cli_reports_bad_json_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.write_text("{ not json")
    result = run_cli("engine", "show", "--lock", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "not valid JSON" in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.stderr


def test_engine_show_json_prints_lock_and_digest() -> None:
    result = run_cli("engine", "show", "--json", check=True)
    data = json.loads(result.stdout)
    assert data["digest"] == load_lock().digest
    assert data["lock"]["upstream"]["release"] == "b10189"


def test_every_verb_group_has_help() -> None:
    for group in [
        "engine",
        "patches",
        "image",
        "model",
        "plan",
        "run",
        "trace",
        "bundle",
        "evidence",
        "doctor",
    ]:
        result = run_cli(group, "--help", check=True)
        assert "Usage:" in result.stdout
