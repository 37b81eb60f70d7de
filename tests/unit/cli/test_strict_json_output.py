"""Every `--json` output is strict JSON: each CLI verb that has `--json` is run on small inputs
made here, and what it prints is parsed by a parser that refuses NaN and Infinity (which
Python's json.dumps would otherwise write). The list of verbs comes from the CLI itself, so a
new verb with `--json` fails here until it is given an invocation.

Verbs that need Docker, a network, a cluster or a long build are run with inputs that make
them refuse early (REFUSE): their stdout must then be empty or strict JSON too."""

import json
import math
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.cli import cli
from appliance.cli.options import strict_json
from appliance.trace.format import write_trace
from appliance.trace.synth import TraceSynthSpec, synth_trace
from tests.conftest import REPO, run_cli
from tests.fake_run import make_run


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


def strict_loads(text: str) -> Any:
    return json.loads(text, parse_constant=_refuse_constant)


def json_verbs() -> list[str]:
    ctx = click.Context(cli)
    found = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])
        elif any(isinstance(p, click.Option) and "--json" in p.opts for p in command.params):
            found.append(" ".join(path))

    walk(cli, [])
    return sorted(found)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("json")
    keys = init_keys(root / "keys")
    bundle = make_run(root / "runs")
    finalize_bundle(bundle, keys.private)
    trace = synth_trace(TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=4, n_decode=6, seed=5))
    trace_path = write_trace(root / "t.moetrace", trace.header, np.asarray(trace.rows))
    (root / "models").mkdir()
    return {
        "root": str(root),
        "bundle": str(bundle),
        "public": str(keys.public),
        "trace": str(trace_path),
        "model": str(root / "m.gguf"),
        "models": str(root / "models"),
        "finding": sorted(p.stem for p in (REPO / "evidence").glob("*.json"))[0],
    }


# verb -> arguments (formatted with the inputs) for a run that prints JSON and exits 0
PRODUCE: dict[str, list[str]] = {
    "bundle show": ["{bundle}"],
    "bundle verify": ["{bundle}", "--key", "{public}"],
    "engine show": [],
    "evidence list": [],
    "evidence show": ["{finding}"],
    # the published input's first layer, hashed only (about 1 GB: seconds)
    "model digest": ["--like", str(REPO / "evidence/plans/qwen3-30b-a3b-q4_k_m.input.json"), "--layers", "1"],
    "model synth": ["{model}", "--arch", "qwen3moe", "--size", "16MiB", "--experts", "8", "--layers", "2"],
    "patches list": [],
    "plan": ["{model}", "--ram", "8GiB", "--vram", "0"],
    "report": ["{bundle}", "--key", "{public}", "--out", "{root}/report.html"],
    "trace compare": ["{trace}", "{trace}"],
    "trace info": ["{trace}"],
    "trace lookahead": ["{trace}", "--capacity", "0.5"],
    "trace replay": ["{trace}", "--capacity", "2,4,8", "--policy", "lru,belady"],
}
# verb -> arguments for a run that is refused before Docker, a network, a cluster or a build
REFUSE: dict[str, list[str]] = {
    "cluster status": ["--address", "127.0.0.1:9"],
    "doctor": [],  # prints its checks as JSON, exit status by what it found
    "engine build": ["--source", "no-such-source"],
    "engine fetch": ["--source", "no-such-source"],
    "evidence compare": ["{bundle}", "--key", "{public}"],
    "image build": ["--target", "no-such-target"],
    "image export": ["cpu", "{root}/no-such-dir/x.tar"],
    "image inspect": ["moe-appliance-test/no-such-image:none"],
    "image push": ["--target", "no-such-target", "--registry", "127.0.0.1:9", "--key", "{root}"],
    "image selftest": ["moe-appliance-test/no-such-image:none"],
    "patches apply": ["--source", "no-such-source", "--out", "{root}/patched"],
    "patches check": ["--lock", "{root}/no-such-lock.json"],
    "pull": ["no-such-target"],
    "release-check": ["--help"],  # a whole release check takes minutes; its JSON writer is shared
    "run": ["tiny-oversub", "--dry-run", "--models", "{models}"],
    "sweep": ["tiny-oversub", "--dry-run", "--models", "{models}"],
    "trace calibration": ["{trace}"],  # a tiny synthetic trace: outside the real range, exit 1
}


def test_every_json_verb_has_an_invocation() -> None:
    verbs = json_verbs()
    assert verbs, "no verb with --json found"
    assert sorted(set(PRODUCE) | set(REFUSE)) == verbs


def _run(verb: str, args: list[str], inputs: dict[str, str]) -> Any:
    argv = [*verb.split(), *(a.format(**inputs) for a in args)]
    if "--help" not in argv:
        argv.append("--json")
    return run_cli(*argv, env={"APPLIANCE_TRUSTED_KEYS": str(Path(inputs["root"]) / "trusted")}, timeout=300)


@pytest.mark.parametrize("verb", sorted(PRODUCE))
def test_json_output_is_strict(verb: str, inputs: dict[str, str]) -> None:
    if verb == "plan":  # the model is made by `model synth`, which may not have run first
        _run("model synth", PRODUCE["model synth"], inputs)
    result = _run(verb, PRODUCE[verb], inputs)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "no JSON printed"
    strict_loads(result.stdout)


@pytest.mark.parametrize("verb", sorted(REFUSE))
def test_json_output_of_a_refusal_is_empty_or_strict(verb: str, inputs: dict[str, str]) -> None:
    result = _run(verb, REFUSE[verb], inputs)
    assert "Traceback" not in result.stderr, result.stderr
    if result.stdout.strip() and "--help" not in REFUSE[verb]:
        strict_loads(result.stdout)


def test_the_strict_parser_refuses_what_python_would_print() -> None:
    for text in (json.dumps({"x": math.nan}), json.dumps([math.inf]), json.dumps(-math.inf)):
        with pytest.raises(ValueError, match="is not standard JSON"):
            strict_loads(text)


def test_the_json_writer_prints_non_finite_numbers_as_null() -> None:
    data = {"rate": math.nan, "rows": [1.5, math.inf, -math.inf], "nested": {"t": (math.nan,)}}
    assert strict_loads(strict_json(data)) == {
        "rate": None,
        "rows": [1.5, None, None],
        "nested": {"t": [None]},
    }
