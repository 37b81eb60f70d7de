"""`run` and `sweep` take the same trial options, declared once (cli.options.trial_options):
both verbs still accept and list every option they had, and the rules between the options
refuse the same way in both."""

import dataclasses
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from appliance.cli.options import TrialArgs, trial_options
from appliance.cli.run import run_command
from appliance.cli.sweep import sweep_command
from appliance.core.errors import ConfigError
from appliance.workflows.run import RunOptions

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
    "--variants",
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


def _parsed(args: list[str]) -> TrialArgs:
    got: list[TrialArgs] = []

    @click.command()
    @trial_options("run")
    def command(trial: TrialArgs) -> None:
        got.append(trial)

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    return got[0]


def test_the_command_gets_one_value_holding_what_was_typed(tmp_path: Path) -> None:
    typed = ["--models", str(tmp_path), "--repeats", "3", "--unsigned", "--trial-timeout", "60"]
    trial = _parsed([*typed, "--resume", "--gpu", "1", "--dry-run", "--skeleton", "--json"])
    assert trial == TrialArgs(
        dry_run=True,
        models_dir=tmp_path,
        out=None,
        repeats=3,
        skip_digest_check=False,
        image=None,
        gpu_index=1,
        trial_timeout=60.0,
        as_json=True,
        key=None,
        unsigned=True,
        cluster_address=None,
        max_attempts=3,
        resume=True,
        lock_path=None,
        assume_gpu=None,
        skeleton=True,
    )
    # without --cluster the trials run here: no executor
    assert trial.run_options() == RunOptions(key=None, unsigned=True, trial_timeout=60.0, resume=True)


def test_the_rules_hold_for_the_value_itself(tmp_path: Path) -> None:
    trial = _parsed(["--models", str(tmp_path), "--key", str(tmp_path)])
    with pytest.raises(ConfigError, match=r"^--key and --unsigned contradict each other: choose one$"):
        dataclasses.replace(trial, unsigned=True)
    with pytest.raises(click.UsageError, match=r"^--skeleton needs --dry-run: "):
        dataclasses.replace(trial, skeleton=True)


def test_variants_are_a_comma_separated_list_of_names_each_once(tmp_path: Path) -> None:
    trial = _parsed(["--models", str(tmp_path), "--variants", " expert-lru, baseline,,expert-lru "])
    assert trial.variants == ("expert-lru", "baseline")
    assert _parsed(["--models", str(tmp_path)]).variants == ()


@pytest.mark.parametrize("verb", ["run", "sweep"])
def test_an_empty_variant_list_is_refused(verb: str, tmp_path: Path) -> None:
    args = ["tiny-oversub", "--models", str(tmp_path), "--variants", " , "]
    result = CliRunner().invoke(COMMANDS[verb], args)
    assert result.exit_code == 2
    assert "name at least one variant, e.g. --variants baseline,demand-mmap" in result.output
