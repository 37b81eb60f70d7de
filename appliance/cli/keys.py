"""CLI: `appliance keys`."""

from pathlib import Path

import click

from appliance.attest.dsse import default_key_dir, init_keys


@click.group("keys")
def keys_group() -> None:
    """Signing keys for run bundles (kept outside any repository)."""


@keys_group.command("init")
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="Where to keep the key pair (default ~/.config/appliance/keys).")
@click.option("--force", is_flag=True, help="Replace an existing key pair.")
def keys_init(directory: Path | None, force: bool) -> None:
    """Make an ed25519 key pair for signing bundles."""
    pair = init_keys(directory or default_key_dir(), force=force)
    click.echo(f"private key: {pair.private} (mode 0600, never share or commit it)")
    click.echo(f"public key:  {pair.public}")
    click.echo(f"key id:      {pair.keyid}")


COMMANDS: list[click.Command] = [keys_group]
