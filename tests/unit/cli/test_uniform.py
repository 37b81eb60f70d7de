"""Every verb behaves alike: errors through the entry point, one --json, one --key rule."""

import ast
from pathlib import Path

import click

from appliance.cli import VERBS, cli
from tests.conftest import REPO, run_cli

CLI_DIR = REPO / "appliance" / "cli"


def all_commands() -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []

    def walk(prefix: str, command: click.Command) -> None:
        found.append((prefix, command))
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(f"{prefix} {name}", sub)

    ctx = click.Context(cli)
    for name in VERBS:
        command = cli.get_command(ctx, name)
        assert command is not None
        walk(name, command)
    return found


def test_only_the_entry_point_exits() -> None:
    offenders = []
    for path in sorted(CLI_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        entry_point = path.name == "__init__.py"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
                and node.attr in ("exit", "argv")
                and not entry_point
            ):
                offenders.append(f"{path.name}:{node.lineno} sys.{node.attr}")
            if isinstance(node, ast.Name) and node.id == "SystemExit":
                offenders.append(f"{path.name}:{node.lineno} SystemExit")
    assert offenders == []


def test_every_json_option_is_the_shared_one() -> None:
    with_json = []
    for name, command in all_commands():
        for param in command.params:
            if "--json" in getattr(param, "opts", []):
                assert param.name == "as_json" and isinstance(param, click.Option)
                assert param.help == "Print machine-readable JSON.", name
                with_json.append(name)
    assert {"engine show", "trace info", "trace replay", "run", "doctor"} <= set(with_json)


def test_key_with_unsigned_is_refused_the_same_way_everywhere(tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    key.write_text("not read")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    outputs = [
        run_cli("bundle", "sign", str(bundle), "--key", str(key), "--unsigned"),
        run_cli("run", "tiny-oversub", "--models", str(tmp_path), "--key", str(key), "--unsigned"),
    ]
    for result in outputs:
        assert result.returncode == 2
        assert result.stderr == "error: --key and --unsigned contradict each other: choose one\n"
    assert list(bundle.iterdir()) == []


def test_debug_comes_from_the_command_line_context(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    plain = run_cli("engine", "show", "--lock", missing)
    assert plain.returncode == 2
    assert plain.stderr.count("\n") == 1 and plain.stderr.startswith("error: ")
    debug = run_cli("--debug", "engine", "show", "--lock", missing)
    assert debug.returncode == 2
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.splitlines()[-1] == plain.stderr.strip()
    # "--debug" as a value of another option is not the flag
    value = run_cli("engine", "show", "--lock", "--debug")
    assert "Traceback" not in value.stderr and value.returncode == 2
