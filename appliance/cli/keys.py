"""CLI: `appliance keys`."""

from pathlib import Path

import click

from appliance.attest.dsse import PRIVATE_KEY_FILE, default_key_dir
from appliance.attest.trust import (
    init_trusted_keys,
    store_entries,
    trust_key,
    trusted_keys_dir,
    untrust_key,
)


@click.group("keys")
def keys_group() -> None:
    """Signing keys for run bundles (kept outside any repository) and the keys you trust."""


@keys_group.command("init")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where to keep the key pair (default ~/.config/appliance/keys).",
)
@click.option("--force", is_flag=True, help="Replace an existing key pair.")
@click.option(
    "--if-missing", is_flag=True, help="Keep an existing key pair (and say so) instead of refusing."
)
def keys_init(directory: Path | None, force: bool, if_missing: bool) -> None:
    """Make an ed25519 key pair for signing bundles and trust its public key."""
    if force and if_missing:
        raise click.UsageError("--force replaces the key pair, --if-missing keeps it: pass one")
    directory = directory or default_key_dir()
    if if_missing and (directory / PRIVATE_KEY_FILE).exists():
        click.echo(f"private key: {directory / PRIVATE_KEY_FILE} (kept: it exists)")
        return
    pair, stored = init_trusted_keys(directory, force=force)
    click.echo(f"private key: {pair.private} (mode 0600, never share or commit it)")
    click.echo(f"public key:  {pair.public}")
    click.echo(f"key id:      {pair.keyid}")
    click.echo(f"trusted:     {stored}")


@keys_group.command("trust")
@click.argument("file", type=click.Path(path_type=Path, exists=True))
def keys_trust(file: Path) -> None:
    """Trust the public key in FILE (a .pub.json file or a key directory)."""
    key, stored = trust_key(file)
    click.echo(f"trusted {key.keyid} ({stored})")


@keys_group.command("list")
def keys_list() -> None:
    """The trusted keys, by id (recomputed from each key), and files that are ignored."""
    entries = store_entries()
    if not entries:
        click.echo(f"no trusted keys in {trusted_keys_dir()}")
    for entry in entries:
        if entry.key is not None:
            click.echo(f"{entry.key.keyid}  {entry.path}")
        else:
            click.echo(f"IGNORED {entry.path}: {entry.problem}")


@keys_group.command("untrust")
@click.argument("keyid")
def keys_untrust(keyid: str) -> None:
    """Stop trusting the key KEYID (its id, or at least 8 leading characters)."""
    removed = untrust_key(keyid)
    click.echo(f"removed {removed}")


COMMANDS: list[click.Command] = [keys_group]
