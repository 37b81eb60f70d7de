"""The package layout: stages import only earlier stages, nothing imports the CLI, no cycles."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "appliance"
# The one-way flow, earliest first. A module may import its own stage and any earlier one.
STAGES = [
    "core",
    "engine",
    "host",
    "models",
    "trace",
    "images",
    "planner",
    "runs",
    "analysis",
    "attest",
    "evidence",
    "release",
    "workflows",
    "cluster",
    "cli",
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every appliance module a file imports, at any depth (lazy imports count too)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("appliance"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("appliance"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _is_module(candidate) else base)
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file()


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_directly_under_the_package() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert loose == []
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} <= set(STAGES)


def test_no_stage_imports_a_later_stage_and_nothing_imports_the_cli() -> None:
    problems = []
    for module, deps in graph().items():
        here = stage_of(module)
        for dep in deps:
            there = stage_of(dep)
            if there == "cli" and here != "cli" and module != "appliance.__main__":
                problems.append(f"{module} imports the CLI ({dep})")
            elif here and there and STAGES.index(there) > STAGES.index(here):
                problems.append(f"{module} ({here}) imports later stage {dep} ({there})")
    assert problems == []


def test_import_graph_has_no_cycle() -> None:
    deps = {m: {d for d in ds if d != m} for m, ds in graph().items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(deps.get(node, ())):
            if nxt not in deps:
                continue
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt) :] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for module in sorted(deps):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_checker_sees_violations(tmp_path: Path) -> None:
    """The walker resolves relative and lazy imports, so the rules above are not vacuous."""
    sample = PACKAGE / "core" / "errors.py"
    assert imports_of(sample) == set()
    deps = graph()
    assert "appliance.engine.lock" in deps["appliance.engine.source"]
    assert "appliance.analysis.plots" in deps["appliance.analysis.results"]  # imported inside a function
    assert stage_of("appliance.cli.plan") == "cli"


def top_level_imports(path: Path) -> set[str]:
    """The top-level package of every import in a file, at any depth (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def module_path(module: str) -> Path:
    rel = REPO / Path(*module.split("."))
    return rel.with_suffix(".py") if rel.with_suffix(".py").is_file() else rel / "__init__.py"


def test_analysis_imports_neither_docker_nor_ray_even_through_other_modules() -> None:
    """The analysis stage reads run directories; it must run where no engine or cluster is."""
    deps = graph()
    problems = []
    for module in sorted(m for m in deps if stage_of(m) == "analysis"):
        seen, pending = set(), [module]
        while pending:
            current = pending.pop()
            if current in seen or current not in deps:
                continue
            seen.add(current)
            for banned in sorted(top_level_imports(module_path(current)) & {"docker", "ray"}):
                problems.append(f"{module} imports {banned} (through {current})")
            pending.extend(deps[current])
    assert problems == []
    assert "docker" in top_level_imports(module_path("appliance.runs.trial"))  # the walker sees it


# What runs where Docker and Ray are not: verifying and reporting on a bundle, comparing it with
# evidence, replaying a trace, planning from a header, and every analysis module.
NO_DOCKER = [
    "appliance.attest.verify",
    "appliance.cli.bundle",
    "appliance.cli.report",
    "appliance.workflows.report_page",
    "appliance.cli.evidence",
    "appliance.evidence.compare",
    "appliance.trace.replay",
    "appliance.cli.trace",
    "appliance.planner.plan",
    "appliance.cli.plan",
    *(module_name(p) for p in sorted((PACKAGE / "analysis").glob("*.py"))),
]
_FIRST_TO_LOAD = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    heavy = [m for m in ("docker", "ray") if m in sys.modules]
    if heavy:
        found[name] = heavy
        break
print(json.dumps(found))
"""


def test_verification_analysis_and_planning_load_neither_docker_nor_ray() -> None:
    """Imported one after another in a fresh interpreter; the first that pulls in docker or ray
    is named."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_TO_LOAD, *NO_DOCKER],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=True,
    )
    assert json.loads(result.stdout) == {}
    assert len(NO_DOCKER) > 20  # the analysis package was found
