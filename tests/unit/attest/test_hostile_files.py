"""Every file the attest and image code reads goes through the strict, bounded readers: a key
file, a trust-store entry, an export sidecar, a bundle's manifest and envelope, run and trial
records. A FIFO, a device, a socket or a symlink to one is refused before it is opened (a FIFO
never blocks), and deep nesting, huge integers and duplicate keys are refused in one line."""

import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.attest.bundle import ATTESTATION_FILE, MANIFEST_FILE, read_run_record
from appliance.attest.dsse import load_public_key
from appliance.attest.verify import CheckName, Verdict, verify_bundle
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.strict_load import read_text
from appliance.images.archive import read_sidecar
from appliance.runs.run_dir import RunDir
from tests.conftest import run_cli
from tests.tamper import Keys

DEADLINE_S = 20  # a reader that blocks on a FIFO would hang forever; this is far above any refusal


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _dev_zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _fifo_link(path: Path) -> Path:
    path.symlink_to(_fifo(path.with_name(path.name + ".fifo")))
    return path


def _socket(path: Path) -> Path:
    server, here = socket.socket(socket.AF_UNIX), Path.cwd()
    os.chdir(path.parent)  # a relative name: the full path may exceed the 108 bytes of sun_path
    try:
        server.bind(path.name)  # the socket file stays after close
    finally:
        os.chdir(here)
        server.close()
    return path


def _deep(path: Path) -> Path:
    path.write_text('{"keyval": ' + "[" * 5000 + "]" * 5000 + "}")
    return path


def _huge_int(path: Path) -> Path:
    path.write_text('{"keytype": "ed25519", "bytes": ' + "7" * 5000 + "}")
    return path


SPECIAL: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "symlink-to-dev-zero": _dev_zero_link,
    "symlink-to-fifo": _fifo_link,
    "socket": _socket,
}
MALFORMED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "nested-5000": (_deep, "nested deeper than 64 levels"),
    "integer-5000-digits": (_huge_int, "a number with more than 100 digits"),
}
ALL = {
    **{name: (make, "is not a regular file") for name, make in SPECIAL.items()},
    **MALFORMED,
}


def _timed(call: Callable[[], object]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_the_strict_reader_refuses_special_files_before_opening_them(kind: str, tmp_path: Path) -> None:
    path = SPECIAL[kind](tmp_path / "f.json")
    with pytest.raises(ConfigError, match=r"is not a regular file \(a device, pipe or socket\)$") as info:
        read_text(path)
    assert str(info.value) == f"{path}: is not a regular file (a device, pipe or socket)"


@pytest.mark.parametrize("kind", sorted(ALL))
def test_keys_trust_refuses_a_hostile_file_in_one_line(kind: str, tmp_path: Path) -> None:
    make, expected = ALL[kind]
    path = make(tmp_path / "their.pub.json")
    store = tmp_path / "store"
    start = time.monotonic()
    result = run_cli("keys", "trust", str(path), env={"APPLIANCE_TRUSTED_KEYS": str(store)}, timeout=60)
    assert time.monotonic() - start < DEADLINE_S
    assert result.returncode != 0 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and expected in lines[0], result.stderr
    assert not store.exists() or not list(store.iterdir())  # nothing trusted


@pytest.mark.parametrize("kind", sorted(ALL))
def test_a_hostile_trust_store_entry_is_skipped_with_a_warning(
    kind: str, tmp_path: Path, genuine: Path, trust_store: Path
) -> None:
    make, expected = ALL[kind]
    entry = make(trust_store / f"{'ab' * 32}.pub.json")
    verification: list[object] = []
    elapsed = _timed(lambda: verification.append(verify_bundle(genuine)))
    assert elapsed < DEADLINE_S
    result = verification[0]
    assert result.verdict is Verdict.VERIFIED  # the genuine bundle still verifies
    [warning] = [c for c in result.checks if c.name == CheckName.TRUST_STORE]
    assert warning.status.value == "warn" and warning.files == [str(entry)]
    assert warning.reason.startswith(f"skipped {entry}: ") and expected in warning.reason
    listed = run_cli("keys", "list", env={"APPLIANCE_TRUSTED_KEYS": str(trust_store)}, timeout=60)
    assert f"IGNORED {entry}: " in listed.stdout and expected in listed.stdout


READERS: dict[str, tuple[str, Callable[[Path], object]]] = {  # the file name each reader is given
    "public key (bundle verify --key)": ("k.pub.json", load_public_key),
    "image export sidecar (pull --from)": ("engine.tar.sidecar.json", read_sidecar),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", sorted(ALL))
def test_a_hostile_key_file_or_sidecar_is_refused_in_one_line(kind: str, reader: str, tmp_path: Path) -> None:
    make, expected = ALL[kind]
    name, read = READERS[reader]
    path = make(tmp_path / name)
    with pytest.raises(ApplianceError, match=expected) as info:
        read(path)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{path}: ")


def test_a_sidecar_with_a_duplicate_key_or_a_huge_number_in_its_payload_is_refused(tmp_path: Path) -> None:
    import base64

    def envelope(payload: bytes) -> dict[str, object]:
        return {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": "application/vnd.moe-appliance.image-export+json",
            "signatures": [],
        }

    path = tmp_path / "a.sidecar.json"
    path.write_text(json.dumps(envelope(b'{"target": "cpu", "target": "sm120"}')))
    with pytest.raises(IntegrityError, match=r"malformed sidecar payload \(line 1: duplicate key 'target'"):
        read_sidecar(path)
    path.write_text(json.dumps(envelope(b'{"archive": {"bytes": ' + b"9" * 6000 + b"}}")))
    with pytest.raises(IntegrityError, match="a number with more than 100 digits"):
        read_sidecar(path)
    path.write_text('{"payload": "", "payload": "", "payloadType": "x", "signatures": []}')
    with pytest.raises(IntegrityError, match=r"not a DSSE envelope \(line 1: duplicate key 'payload'"):
        read_sidecar(path)


def _copy(genuine: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(genuine, run)
    return run


def test_a_manifest_with_a_duplicate_key_no_longer_verifies(
    genuine: Path, keys: Keys, tmp_path: Path
) -> None:
    run = _copy(genuine, tmp_path)
    text = (run / MANIFEST_FILE).read_text()
    assert text.startswith("{\n")
    # the same value twice: json.loads would read the very same manifest
    (run / MANIFEST_FILE).write_text('{\n  "manifest_version": 1,' + text[1:])
    assert json.loads((run / MANIFEST_FILE).read_text()) == json.loads(text)
    result = verify_bundle(run, keys.trusted.public)
    assert result.verdict is Verdict.TAMPERED
    [check] = [c for c in result.checks if c.name == CheckName.MANIFEST]
    assert check.reason == (
        f"{MANIFEST_FILE} is not strict JSON (line 3: duplicate key 'manifest_version' (first at line 2))"
    )


@pytest.mark.parametrize("name", [MANIFEST_FILE, ATTESTATION_FILE])
def test_a_sealing_file_replaced_by_a_fifo_fails_at_once(
    name: str, genuine: Path, keys: Keys, tmp_path: Path
) -> None:
    run = _copy(genuine, tmp_path)
    (run / name).unlink()
    _fifo(run / name)
    verification: list[object] = []
    assert _timed(lambda: verification.append(verify_bundle(run, keys.trusted.public))) < DEADLINE_S
    assert getattr(verification[0], "verdict", None) is Verdict.TAMPERED


def test_an_envelope_payload_with_a_duplicate_key_is_refused(
    genuine: Path, keys: Keys, tmp_path: Path
) -> None:
    import base64

    run = _copy(genuine, tmp_path)
    envelope = json.loads((run / ATTESTATION_FILE).read_text())
    payload = base64.b64decode(envelope["payload"])
    assert payload.startswith(b'{"_type":')
    envelope["payload"] = base64.b64encode(b'{"_type":"x",' + payload[1:]).decode()
    (run / ATTESTATION_FILE).write_text(json.dumps(envelope))
    result = verify_bundle(run, keys.trusted.public)
    assert result.verdict is Verdict.TAMPERED
    reasons = " ".join(c.reason for c in result.checks if not c.ok)
    assert "attestation payload: line 1: duplicate key '_type'" in reasons


@pytest.mark.parametrize("kind", sorted(ALL))
def test_run_and_trial_records_are_read_strictly(kind: str, genuine: Path, tmp_path: Path) -> None:
    make, expected = ALL[kind]
    run = _copy(genuine, tmp_path)
    (run / "run.json").unlink()
    make(run / "run.json")
    with pytest.raises(ConfigError, match=expected):
        read_run_record(run)
    trial_json = sorted((run / "trials").glob("*/trial.json"))[0]
    trial_json.unlink()
    make(trial_json)
    with pytest.raises(ConfigError, match=expected) as info:
        RunDir(run).load_trials()
    assert str(info.value).startswith(f"{trial_json}: ")
