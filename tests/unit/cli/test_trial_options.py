"""`run` and `sweep` take the same trial options, declared once (cli.options.trial_options):
both verbs still accept and list every option they had, and the rules between the options
refuse the same way in both."""

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from appliance.cli.run import run_command
from appliance.cli.sweep import sweep_command

SHARED = {
    "--assume-gpu",
    "--cluster",
    "--dry-run",
    "--gpu",
    "--image",
    "--json",
    "--key",
    "--lock",
    "--max-attempts",
    "--models",
    "--out",
    "--repeats",
    "--resume",
    "--skeleton",
    "--skip-digest-check",
    "--trial-timeout",
    "--unsigned",
}
OPTIONS = {"run": SHARED, "sweep": SHARED | {"--max-hours", "--memory"}}
COMMANDS = {"run": run_command, "sweep": sweep_command}


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_each_verb_takes_every_option_it_had(verb: str) -> None:
    command = COMMANDS[verb]
    names = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
    assert names == OPTIONS[verb]
    assert [p.name for p in command.params if isinstance(p, click.Argument)] == ["profile_name"]


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_help_lists_every_option(verb: str) -> None:
    result = CliRunner().invoke(COMMANDS[verb], ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    listed = {word.rstrip(",") for line in result.output.splitlines() for word in line.split()[:2]}
    assert OPTIONS[verb] | {"--help"} <= listed, result.output
    assert f"Usage: {verb} [OPTIONS] PROFILE" in result.output


@pytest.mark.parametrize("verb", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--skeleton"], "--skeleton needs --dry-run: a real run needs the model file itself"),
        (["--assume-gpu", "8.9:24GiB"], "--assume-gpu needs --dry-run: a real run uses the GPUs it sees"),
    ],
)
def test_dry_run_only_options_are_refused_alike(
    verb: str, flags: list[str], message: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(COMMANDS[verb], ["tiny-oversub", "--models", str(tmp_path), *flags])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: {message}"
