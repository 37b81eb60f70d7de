"""The CLI starts fast: heavy libraries load only inside the verbs that use them."""

import importlib
import json
import os
import subprocess
import sys

import click

from appliance.cli import VERBS, cli
from tests.conftest import REPO

HEAVY = ("docker", "numpy", "numba", "securesystemslib", "matplotlib", "gguf", "boto3", "requests", "rich")


def loaded_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running `code`."""
    probe = (
        f"import sys\n{code}\n"
        f"print(__import__('json').dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.splitlines()[-1]))


def run_main(*args: str) -> str:
    return (
        f"sys.argv = ['appliance', *{list(args)!r}]\n"
        "from appliance.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )


def test_importing_the_cli_loads_no_heavy_module() -> None:
    assert loaded_after("import appliance.cli") == []


def test_help_loads_no_heavy_module() -> None:
    assert loaded_after(run_main("--help")) == []


def test_engine_show_loads_only_the_table_printer() -> None:
    assert loaded_after(run_main("engine", "show")) == ["rich"]
    assert loaded_after(run_main("engine", "show", "--json")) == []


def test_small_trace_verbs_load_neither_numba_nor_docker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.moetrace"
    code = run_main("trace", "synth", str(trace), "--seed", "1")
    assert "docker" not in loaded_after(code)
    for verb in (["replay", str(trace), "--capacity", "8"], ["info", str(trace)]):
        loaded = loaded_after(run_main("trace", *verb))
        assert loaded == ["numpy"], verb


def test_the_verb_table_lists_every_command_with_its_own_help() -> None:
    ctx = click.Context(cli)
    for name, verb in VERBS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(10_000) == verb.summary, name
    for module_name in {verb.module for verb in VERBS.values()}:
        module = importlib.import_module(module_name)
        for command in module.COMMANDS:
            assert VERBS[str(command.name)].module == module_name
