"""The documents tell the truth about the code: their runnable commands run, their verbs exist.

A fenced block whose info string is `sh runnable` (in README.md, docs/reproducing.md levels 0
and 1, docs/publication-scope.md) is run line by line with bash in the repository root, with
`appliance` on PATH and `$WORK` set to a fresh temporary directory. Such blocks need no GPU, no
real model and finish quickly; the long commands (`make demo`, `make repro-*`, image builds)
sit in plain `sh` blocks and are covered by tests/integration and tests/e2e. Every `appliance`
command and `make` target named in any `sh` block of the user documents must exist, with the
options it is given; the headline findings' numbers quoted in the overviews must be those of
evidence/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from tests.conftest import REPO

RUNNABLE_DOCS = ("README.md", "docs/reproducing.md", "docs/publication-scope.md", "docs/trace-format.md")
SH_DOCS = (*RUNNABLE_DOCS, "CONTRIBUTING.md", "docs/limitations.md", "docs/zh-CN.md", "SUPPORT.md")
FENCE = re.compile(r"^```(.*)$")
LINE_TIMEOUT_S = 600
APPLIANCE_CALL = re.compile(r"(?:^|[\s(=/])appliance\s+([^|;&)#]*)")
MAKE_CALL = re.compile(r"(?:^|[\s(])make\s+([^|;&)#]*)")
TRAILING_COMMENT = re.compile(r"\s+#.*$")
MAKE_RULE = re.compile(r"^([A-Za-z0-9_.%$() -]+?)\s*:(?!=)", re.M)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    info: str
    section: str  # the nearest heading above the block
    commands: tuple[str, ...]

    @property
    def runnable(self) -> bool:
        return self.info.split() == ["sh", "runnable"]

    @property
    def shell(self) -> bool:
        return self.info.split()[:1] == ["sh"]

    @property
    def needs_docker(self) -> bool:
        return self.section.startswith("Level 1")

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def commands(lines: list[str]) -> tuple[str, ...]:
    """Shell commands of a block: comments and blank lines dropped, continuations joined."""
    out: list[str] = []
    pending = ""
    for raw in lines:
        text = raw.rstrip()
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text = pending + text
        pending = ""
        if text.strip() and not text.lstrip().startswith("#"):
            out.append(text.strip())
    return tuple(out)


def blocks(doc: str) -> list[Block]:
    found: list[Block] = []
    section = ""
    lines = (REPO / doc).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            if lines[i].startswith("#"):
                section = lines[i].lstrip("#").strip()
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        found.append(Block(doc, i + 1, fence.group(1).strip(), section, commands(lines[i + 1 : end])))
        i = end + 1
    return found


def runnable_blocks() -> list[Block]:
    return [b for doc in RUNNABLE_DOCS for b in blocks(doc) if b.runnable]


def shell_blocks() -> list[Block]:
    return [b for doc in SH_DOCS for b in blocks(doc) if b.shell]


def appliance_on_path(bin_dir: Path) -> str:
    """PATH with the test interpreter's bin dir first, or a shim running `python -m appliance`."""
    interpreter_bin = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (interpreter_bin / "appliance").is_file():
        return f"{interpreter_bin}{os.pathsep}{path}"
    shim = bin_dir / "appliance"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m appliance "$@"\n')
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{interpreter_bin}{os.pathsep}{path}"


def checkout_state() -> tuple[str | None, list[str]]:
    """What a block must not change: git's view of the checkout, and runs/ (which git ignores)."""
    runs = sorted(p.name for p in (REPO / "runs").iterdir()) if (REPO / "runs").is_dir() else []
    if not (REPO / ".git").exists():
        return None, runs
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return status, runs


@pytest.mark.network
@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: b.id)
def test_runnable_block(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if block.needs_docker:
        request.getfixturevalue("docker_client")
    work = tmp_path / "work"
    work.mkdir()
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    env = dict(os.environ)
    env["PATH"] = appliance_on_path(shim_dir)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["WORK"] = str(work)
    before = checkout_state()
    for command in block.commands:
        result = subprocess.run(
            ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=LINE_TIMEOUT_S
        )
        assert result.returncode == 0, (
            f"{block.id}: `{command}` exited {result.returncode}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )
    after = checkout_state()
    assert after == before, f"{block.id} wrote into the checkout: {before} -> {after}"


def test_reproducing_runs_levels_0_and_1_only() -> None:
    found = [b for b in blocks("docs/reproducing.md") if b.runnable]
    sections = {b.section.split(":")[0] for b in found}
    assert sections == {"Level 0", "Level 1"}, sections
    assert len(found) >= 6
    gpu_level = [b for b in blocks("docs/reproducing.md") if b.section.startswith("Level 2")]
    assert gpu_level and not any(b.runnable for b in gpu_level)


def test_publication_scope_runs_release_check() -> None:
    found = [c for b in blocks("docs/publication-scope.md") if b.runnable for c in b.commands]
    assert "appliance release-check" in found


def test_block_parser_joins_continuations_and_drops_comments(tmp_path: Path) -> None:
    assert commands(["# a comment", "", "appliance plan X \\", "  --ram 8GiB", "ls  "]) == (
        "appliance plan X    --ram 8GiB",
        "ls",
    )


def resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    """The click command an `appliance ARGS` line names, and the words after it."""
    from appliance.cli import cli

    command: click.Command = cli
    while args and isinstance(command, click.Group):
        sub = command.get_command(click.Context(command), args[0])
        if sub is None:
            break
        command = sub
        args.pop(0)
    return command, args


def unknown_options(command: click.Command, words: list[str]) -> list[str]:
    known = {
        opt
        for param in command.get_params(click.Context(command))
        for opt in (*param.opts, *param.secondary_opts)
    }
    return [w for w in words if w.startswith("-") and w.split("=")[0] not in known]


def makefile_targets() -> set[str]:
    targets: set[str] = set()
    for rule in MAKE_RULE.findall((REPO / "Makefile").read_text()):
        targets.update(name for name in rule.split() if not name.startswith("."))
    return targets


HEADLINE_FINDINGS = (
    "qwen35-35b-a3b-8g-demand-mmap",
    "qwen3-30b-a3b-16-oversubscription-gate",
    "gpu-hot-cpu-miss-expert-cache-rejected",
)


def quoted(value: float, unit: str) -> str:
    """A metric value as the documents write it: the JSON number, or a fraction in percent."""
    return f"{round(value * 100, 6):g}%" if unit == "fraction" else str(value)


def quotes(text: str, number: str) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text) is not None


@pytest.mark.parametrize("doc", ["docs/zh-CN.md", "docs/limitations.md", "README.md"])
def test_headline_numbers_match_evidence(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    missing = []
    for finding_id in HEADLINE_FINDINGS:
        finding = json.loads((REPO / "evidence" / f"{finding_id}.json").read_text())
        for metric in finding["metrics"]:
            missing += [
                f"{finding_id} {metric['name']} {variant}: {quoted(v, metric['unit'])}"
                for variant, v in metric["values"].items()
                if not quotes(text, quoted(v, metric["unit"]))
            ]
    assert not missing, f"{doc} does not quote evidence/ as it stands: {missing}"


def line_problems(line: str, targets: set[str]) -> list[str]:
    """Why a documented shell line names an `appliance` command, option or make target that
    does not exist ([] when everything it names exists)."""
    problems: list[str] = []
    line = TRAILING_COMMENT.sub("", line)
    for call in APPLIANCE_CALL.findall(line):
        words = shlex.split(call.replace("<", "").replace(">", ""))
        command, rest = resolve(words)
        if isinstance(command, click.Group) and rest[:1] != ["--help"]:
            problems.append(f"`appliance {call.strip()}`: no such command")
        elif bad := unknown_options(command, rest):
            problems.append(f"`appliance {call.strip()}`: unknown option {', '.join(bad)}")
    for call in MAKE_CALL.findall(line):
        problems += [
            f"`make {word}`: no such Makefile target"
            for word in shlex.split(call)
            if "=" not in word and word not in targets
        ]
    return problems


def test_the_existence_check_catches_unknown_verbs_options_and_targets() -> None:
    targets = makefile_targets()
    assert {"demo", "test", "venv", "image-cpu", "image-sm120"} <= targets
    assert line_problems('appliance plan "$WORK/m.gguf" --ram 8GiB --vram 0  # --nope', targets) == []
    assert line_problems("make test  # make nothing", targets) == []
    assert line_problems("x=$(appliance trace frobnicate T)", targets) == [
        "`appliance trace frobnicate T`: no such command"
    ]
    assert line_problems("appliance plan M --ram 1GiB --color", targets) == [
        "`appliance plan M --ram 1GiB --color`: unknown option --color"
    ]
    assert line_problems("make repro-nowhere MODELS=/m", targets) == [
        "`make repro-nowhere`: no such Makefile target"
    ]


def test_every_documented_command_exists() -> None:
    targets = makefile_targets()
    problems = [
        f"{block.id}: {problem}"
        for block in shell_blocks()
        for line in block.commands
        for problem in line_problems(line, targets)
    ]
    assert not problems, "\n".join(problems)
