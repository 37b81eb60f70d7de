"""run, demo and repro sign with the user's key, made and trusted on first use."""

import io
from pathlib import Path

import pytest
from rich.console import Console

from appliance.attest.trust import trusted_keys
from appliance.workflows.run import signing_key


def test_first_use_makes_and_trusts_a_key_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(tmp_path / "trusted"))
    out = io.StringIO()
    console = Console(file=out, width=80)
    key = signing_key(None, False, console)
    keys = tmp_path / "config" / "appliance" / "keys"
    assert key == keys and (keys / "appliance-ed25519.key").exists()
    [keyid] = trusted_keys()
    assert f"private key {keys / 'appliance-ed25519.key'}" in out.getvalue()
    assert f"key id {keyid}" in out.getvalue()

    again = io.StringIO()
    assert signing_key(None, False, Console(file=again)) == keys
    assert again.getvalue() == "" and list(trusted_keys()) == [keyid]
    assert signing_key(None, True, console) is None
    assert signing_key(tmp_path / "given", False, console) == tmp_path / "given"
