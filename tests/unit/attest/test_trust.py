"""The trust store in process (the CLI tests run it in a subprocess): which files count as
trusted keys, removing a key by its id or a prefix, and `keys init` adding its own key."""

import json
import re
from pathlib import Path

import pytest

from appliance.attest import trust
from appliance.attest.dsse import PUBLIC_KEY_FILE, init_keys
from appliance.attest.trust import (
    TRUSTED_SUFFIX,
    init_trusted_keys,
    store_entries,
    trust_key,
    trusted_keys,
    untrust_key,
)
from appliance.core.errors import ApplianceError, ConfigError


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "store"
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(directory))
    return directory


def test_store_entries_say_why_a_file_is_not_trusted(tmp_path: Path, store: Path) -> None:
    good = init_keys(tmp_path / "good")
    trust_key(good.public)
    broken = store / f"{'0' * 64}{TRUSTED_SUFFIX}"
    broken.write_text("{")
    misnamed = store / f"{'1' * 64}{TRUSTED_SUFFIX}"
    misnamed.write_text(good.public.read_text())
    entries = {e.path.name: e for e in store_entries()}
    assert entries[broken.name].key is None and entries[broken.name].path == broken
    assert entries[broken.name].problem == (
        "not an appliance public key file (not valid JSON: Expecting property name enclosed in "
        "double quotes at line 1)"
    )
    assert entries[misnamed.name].key is None
    assert entries[misnamed.name].problem == f"named {'1' * 64}, but the key's id is {good.keyid}: ignored"
    assert entries[f"{good.keyid}{TRUSTED_SUFFIX}"].key.keyid == good.keyid  # type: ignore[union-attr]
    assert list(trusted_keys()) == [good.keyid]


def test_untrust_by_a_prefix_of_at_least_eight_characters(tmp_path: Path, store: Path) -> None:
    pair = init_keys(tmp_path / "k")
    _, stored = trust_key(pair.public)
    with pytest.raises(
        ConfigError, match=re.escape(f"key id {pair.keyid[:7]!r} is too short: give at least 8 ")
    ):
        untrust_key(pair.keyid[:7])
    assert stored.exists()
    assert untrust_key(pair.keyid[:8].upper()) == stored  # ids are matched case-insensitively
    assert not stored.exists() and trusted_keys() == {}
    with pytest.raises(ApplianceError, match=re.escape(f"no trusted key {pair.keyid} in {store} (see `")):
        untrust_key(pair.keyid)


def test_an_ambiguous_prefix_removes_nothing(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trust, "MIN_ID_PREFIX", 1)  # a one-character prefix: two keys share one quickly
    first: dict[str, Path] = {}
    for i in range(200):
        pair = init_keys(tmp_path / f"k{i}")
        _, stored = trust_key(pair.public)
        if pair.keyid[0] in first:
            break
        first[pair.keyid[0]] = stored
    shared = pair.keyid[0]
    with pytest.raises(ConfigError, match=f"^{shared} names 2 trusted keys: give more of the id$"):
        untrust_key(shared)
    assert stored.exists() and first[shared].exists()
    assert untrust_key(pair.keyid) == stored and first[shared].exists()


def test_init_trusted_keys_trusts_the_new_key(tmp_path: Path, store: Path) -> None:
    pair, stored = init_trusted_keys(tmp_path / "keys")
    assert pair.public == tmp_path / "keys" / PUBLIC_KEY_FILE
    assert stored == store / f"{pair.keyid}{TRUSTED_SUFFIX}"
    assert json.loads(stored.read_text()) == json.loads(pair.public.read_text())
    with pytest.raises(ApplianceError, match="--force"):
        init_trusted_keys(tmp_path / "keys")
    again, _ = init_trusted_keys(tmp_path / "keys", force=True)
    assert again.keyid != pair.keyid
    assert set(trusted_keys()) == {pair.keyid, again.keyid}


def test_the_store_is_under_the_config_dir_unless_the_variable_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APPLIANCE_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert trust.trusted_keys_dir() == tmp_path / "config" / "appliance" / "trusted-keys"
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(tmp_path / "elsewhere"))
    assert trust.trusted_keys_dir() == tmp_path / "elsewhere"


def test_a_store_directory_given_is_the_one_used(tmp_path: Path, store: Path) -> None:
    """trust, list and untrust with an explicit directory never touch the default store."""
    pair, second = init_keys(tmp_path / "k"), init_keys(tmp_path / "k2")
    given = tmp_path / "nested" / "given-store"  # parents made, private to its owner
    key, stored = trust_key(pair.public, given)
    assert (key.keyid, stored) == (pair.keyid, given / f"{pair.keyid}{TRUSTED_SUFFIX}")
    assert given.stat().st_mode & 0o777 == 0o700
    assert json.loads(stored.read_text()) == json.loads(pair.public.read_text())
    trust_key(second.public, given)  # into the same, existing directory
    assert not store.exists() and trusted_keys() == {}
    assert sorted(trusted_keys(given)) == sorted([pair.keyid, second.keyid])
    assert untrust_key(pair.keyid[:8], given) == stored
    assert list(trusted_keys(given)) == [second.keyid]


def test_a_too_short_prefix_is_refused_in_one_line(store: Path) -> None:
    with pytest.raises(ConfigError, match="^key id 'abc' is too short") as refused:
        untrust_key("abc")
    assert str(refused.value) == (
        "key id 'abc' is too short: give at least 8 characters (see `appliance keys list`)"
    )
