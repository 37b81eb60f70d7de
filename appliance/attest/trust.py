"""The trust store: public keys whose signatures make a bundle `verified`.

One file per key, `<keyid>.pub.json` (the public key as `appliance keys init` writes it), in
$APPLIANCE_TRUSTED_KEYS, else $XDG_CONFIG_HOME/appliance/trusted-keys, else
~/.config/appliance/trusted-keys. A key's id is always recomputed from its material; a file
whose name is not that id is ignored (and `keys list` says so), never trusted.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from securesystemslib.signer import SSlibKey

from appliance.attest.dsse import KeyPair, default_key_dir, init_keys, key_as_dict, load_public_key
from appliance.core import atomic
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.paths import config_dir

TRUSTED_SUFFIX = ".pub.json"
MIN_ID_PREFIX = 8


def trusted_keys_dir() -> Path:
    override = os.environ.get("APPLIANCE_TRUSTED_KEYS")
    if override:
        return Path(override)
    return config_dir() / "trusted-keys"


@dataclass(frozen=True)
class StoreEntry:
    """One file of the store: its key when the file holds a key named by its own id."""

    path: Path
    key: SSlibKey | None
    problem: str = ""


def store_entries(directory: Path | None = None) -> list[StoreEntry]:
    directory = directory or trusted_keys_dir()
    if not directory.is_dir():
        return []
    entries = []
    for path in sorted(directory.glob(f"*{TRUSTED_SUFFIX}")):
        named = path.name[: -len(TRUSTED_SUFFIX)]
        try:
            key = load_public_key(path)
        except ConfigError as exc:
            entries.append(StoreEntry(path, None, str(exc).replace(f"{path}: ", "")))
            continue
        if key.keyid != named:
            entries.append(StoreEntry(path, None, f"named {named}, but the key's id is {key.keyid}: ignored"))
            continue
        entries.append(StoreEntry(path, key))
    return entries


def keys_of(entries: list[StoreEntry]) -> dict[str, SSlibKey]:
    """key id -> key, for every well-formed entry (the others are skipped, never trusted)."""
    return {e.key.keyid: e.key for e in entries if e.key is not None}


def trusted_keys(directory: Path | None = None) -> dict[str, SSlibKey]:
    """key id -> key, for every well-formed file of the store."""
    return keys_of(store_entries(directory))


def trust_key(source: Path, directory: Path | None = None) -> tuple[SSlibKey, Path]:
    """Copy a public key file (or a key directory's public key) into the store."""
    key = load_public_key(source)
    directory = directory or trusted_keys_dir()
    target = directory / f"{key.keyid}{TRUSTED_SUFFIX}"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic.write_json(target, key_as_dict(key))
    return key, target


def untrust_key(keyid: str, directory: Path | None = None) -> Path:
    """Remove the key whose id is keyid (or starts with it, at least 8 characters)."""
    directory = directory or trusted_keys_dir()
    if len(keyid) < MIN_ID_PREFIX:
        raise ConfigError(
            f"key id {keyid!r} is too short: give at least {MIN_ID_PREFIX} "
            "characters (see `appliance keys list`)"
        )
    matches = [e.path for e in store_entries(directory) if e.path.name.startswith(keyid.lower())]
    if not matches:
        raise ApplianceError(f"no trusted key {keyid} in {directory} (see `appliance keys list`)")
    if len(matches) > 1:
        raise ConfigError(f"{keyid} names {len(matches)} trusted keys: give more of the id")
    matches[0].unlink()
    return matches[0]


def init_trusted_keys(directory: Path | None = None, force: bool = False) -> tuple[KeyPair, Path]:
    """`appliance keys init`: a new key pair, its public key added to the trust store."""
    pair = init_keys(directory or default_key_dir(), force=force)
    _, stored = trust_key(pair.public)
    return pair, stored
