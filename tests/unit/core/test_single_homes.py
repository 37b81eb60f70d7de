"""Each shared fact has one definition: no module outside its home defines it again."""

import ast
import inspect
import re
from pathlib import Path

from appliance.attest.provenance import collect_run_provenance, engine_facts, host_facts
from appliance.engine.lock import load_lock
from appliance.engine.tools import IMAGE_TOOL_PATHS, IMAGE_TOOLS, LOCAL_TOOLS
from appliance.host.cgroups import cgroup_version
from appliance.images import labels
from appliance.images.builders import build_args
from tests.conftest import REPO

PACKAGE = REPO / "appliance"
# name defined (function, class or module-level constant) -> the only module allowed to define it
HOMES = {
    "parse_size": "appliance/core/units.py",
    "format_size": "appliance/core/units.py",
    "parse_bytes": None,
    "UNITS": "appliance/core/units.py",
    "cgroup_version": "appliance/host/cgroups.py",
    "lock_digest": "appliance/engine/lock.py",
    "engine_lock_digest": None,
    "IMAGE_TOOLS": "appliance/engine/tools.py",
    "LOCAL_TOOLS": "appliance/engine/tools.py",
    "TOOLS": None,
    "TARGETS": None,  # the profile schema's enum (appliance/schemas/profile.schema.json)
    "ENGINE_BINARIES": None,
    "target_for_capability": "appliance/host/gpu.py",
    "REPRO_TARGETS_BY_CC": None,
    "_target_for": None,
    "visible_gpus": "appliance/host/gpu.py",
    "gpu_facts": None,
    "sha256_file": "appliance/core/digests.py",
    "_sha256": None,
    "SynthSpec": None,
    "ModelSynthSpec": "appliance/models/shapes.py",
    "TraceSynthSpec": "appliance/trace/synth.py",
    "Limits": None,
    "PlanLimits": "appliance/planner/plan.py",
    "MemoryLimits": "appliance/runs/profile.py",
    # the run directory's layout and what seals it
    "SEALING_FILES": "appliance/runs/run_dir.py",
    "WRITTEN_AT_SEALING": "appliance/runs/run_dir.py",
    "ENGINE_OUTPUTS": "appliance/runs/run_dir.py",
    "RUN_FILE": "appliance/runs/run_dir.py",
    "RESULTS_FILE": "appliance/runs/run_dir.py",
    "PROVENANCE_FILE": "appliance/runs/run_dir.py",
    "MANIFEST_FILE": "appliance/runs/run_dir.py",
    "ATTESTATION_FILE": "appliance/runs/run_dir.py",
    "PROBE_DIR": "appliance/runs/run_dir.py",
    "load_trials": "appliance/runs/run_dir.py",
    "read_probe": "appliance/runs/run_dir.py",
    # trial and run statuses: the enums, never a tuple of their values beside them
    "TrialStatus": "appliance/runs/status.py",
    "RunStatus": "appliance/runs/status.py",
    "RUN_STATUSES": None,
    "TRIAL_STATUSES": None,
    # the capacity model and which device's reads count (appliance.analysis)
    "budget_for": "appliance/analysis/capacity.py",
    "ModelExperts": "appliance/analysis/capacity.py",
    "anon_bytes": "appliance/analysis/capacity.py",
    "model_read_bytes": "appliance/analysis/stats.py",
    # the queue depth a variant reads at, from its engine arguments (what disk_fraction is over)
    "read_depth": "appliance/runs/read_depth.py",
    "probe_depth": "appliance/runs/read_depth.py",
    # bytes per expert: one tensor-name rule and one formula, shared by the trace and the
    # planner, over one GGUF header reader
    "LAYER_TENSOR": "appliance/trace/expert_bytes.py",
    "ROUTED_EXPERT": "appliance/trace/expert_bytes.py",
    "routed_expert_layer": "appliance/trace/expert_bytes.py",
    "expert_slice_bytes": "appliance/trace/expert_bytes.py",
    "LAYER_RE": None,
    "ROUTED_RE": None,
    "EXPERT_TENSOR": None,
    "read_header": "appliance/models/gguf_header.py",
    "read_header_file": "appliance/models/gguf_header.py",
    "tensor_nbytes": "appliance/models/gguf_header.py",
}


def definitions(path: Path) -> set[str]:
    """Names a module defines at any depth (functions, classes) or at top level (constants)."""
    tree = ast.parse(path.read_text(), str(path))
    found = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


# the trees whose definitions the census reads: the package and everything that drives it
CENSUS_TREES = ("appliance", "fuzz", "bench", "tests")
# (module, name) defined outside its home on purpose, each with why
OWN_ON_PURPOSE = {
    # the independent verifier imports nothing of the appliance: it checks the appliance's
    # bundles with its own reading of the format, so it hashes with its own helper
    ("tests/independent_verifier.py", "sha256_file"),
}


def test_every_shared_fact_is_defined_only_in_its_home() -> None:
    problems = []
    paths = sorted(path for tree in CENSUS_TREES for path in (REPO / tree).rglob("*.py"))
    assert len(paths) > 300, "the census must read the package, fuzz/, bench/ and tests/"
    for path in paths:
        rel = path.relative_to(REPO).as_posix()
        for name in sorted(definitions(path) & set(HOMES)):
            if HOMES[name] != rel and (rel, name) not in OWN_ON_PURPOSE:
                problems.append(f"{rel} defines {name} (its home: {HOMES[name] or 'nowhere'})")
    assert problems == []


def test_each_home_defines_its_facts() -> None:
    for name, home in HOMES.items():
        if home is not None:
            assert name in definitions(REPO / home), (name, home)


def test_the_walker_sees_nested_and_constant_definitions(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "X: int = 1\nY = 2\nclass C:\n    def format_size(self): ...\n"
        "def f():\n    def cgroup_version(): ...\n"
    )
    assert definitions(sample) == {"X", "Y", "C", "format_size", "f", "cgroup_version"}


def test_provenance_records_the_facts_of_their_homes() -> None:
    lock = load_lock()
    image = {"labels": {labels.LOCK_DIGEST: lock.digest}}
    facts = engine_facts(lock.raw, image, None)
    assert facts["lock_sha256"] == facts["image_lock_digest"] == lock.digest
    assert host_facts()["cgroup_version"] == cgroup_version()


def test_one_engine_tool_list_for_dockerfile_image_build_provenance_and_local_builds() -> None:
    dockerfile = (REPO / "containers" / "engine.Dockerfile").read_text()
    default = re.search(r'^ARG TOOLS="([^"]*)"$', dockerfile, re.MULTILINE)
    assert default is not None and tuple(default.group(1).split()) == IMAGE_TOOLS
    assert build_args(load_lock().target("cpu"))["TOOLS"] == " ".join(IMAGE_TOOLS)
    assert tuple(f"/usr/local/bin/{t}" for t in IMAGE_TOOLS) == IMAGE_TOOL_PATHS
    assert LOCAL_TOOLS[: len(IMAGE_TOOLS)] == IMAGE_TOOLS and "llama-simple" in LOCAL_TOOLS
    default_binaries = inspect.signature(collect_run_provenance).parameters["binaries"].default
    assert default_binaries == IMAGE_TOOL_PATHS


# The run directory's file names: spelled only in appliance/runs/run_dir.py (docstrings may
# describe the layout; code names the files through RunDir, TrialDir and its constants).
RUN_DIR_MODULE = "appliance/runs/run_dir.py"
RUN_DIR_NAMES = (
    "trace.moetrace",
    "trial.json",
    "timing.json",
    "results.json",
    "run.json",
    "provenance.json",
    "attestation.dsse.json",
    "cgroup.json",
    "report.html",
)


def spelled_names(path: Path, names: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, name) of every string in the module's code, docstrings excepted, holding a name."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        for name in names
        if name in node.value
    ]


def test_the_run_directory_layout_is_spelled_only_in_its_module() -> None:
    problems = [
        f"{path.relative_to(REPO).as_posix()}:{line} spells {name} (name it through {RUN_DIR_MODULE})"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(REPO).as_posix() != RUN_DIR_MODULE
        for line, name in spelled_names(path, RUN_DIR_NAMES)
    ]
    assert problems == []


def test_the_spelling_walker_sees_code_and_fstrings_but_not_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        '"""Writes trial.json."""\nX = "trial.json"\ndef f(d):\n    """reads timing.json"""\n'
        '    return f"{d}/trace.moetrace"\n'
    )
    assert spelled_names(sample, RUN_DIR_NAMES) == [(2, "trial.json"), (5, "trace.moetrace")]


def test_gguf_keys_come_from_gguf_keys_not_spelled_by_hand() -> None:
    """The synthesized models and skeletons name GGUF metadata keys through gguf.Keys."""
    spelled = []
    for rel in (
        "appliance/models/synth.py",
        "appliance/models/skeleton.py",
        "appliance/trace/expert_bytes.py",
    ):
        for node in ast.walk(ast.parse((REPO / rel).read_text())):
            if isinstance(node, ast.JoinedStr):
                parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
                if any(re.match(r"^\.[a-z_]+(\.[a-z_]+)*$", str(p)) for p in parts):
                    spelled.append(f"{rel}:{node.lineno}")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.match(r"^(general|tokenizer\.ggml)\.[a-z_]+$", node.value)
            ):
                spelled.append(f"{rel}:{node.lineno} {node.value}")
    assert spelled == []


EXPERT_BYTES_MODULE = "appliance/trace/expert_bytes.py"
REGEX_CALLS = {"compile", "match", "fullmatch", "search", "findall", "finditer", "sub"}


def expert_regexes_and_readers(path: Path) -> list[str]:
    """A regex over expert tensor names (a pattern holding `exps`) or a use of gguf-py's
    GGUFReader: either would be a second definition of bytes per expert."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in REGEX_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and "exps" in str(node.args[0].value)
        ):
            found.append(f"{node.lineno}: a regex over expert tensor names")
        elif isinstance(node, ast.Name | ast.Attribute) and "GGUFReader" in (
            node.id if isinstance(node, ast.Name) else node.attr
        ):
            found.append(f"{node.lineno}: gguf's GGUFReader (read headers with models/gguf_header.py)")
        elif isinstance(node, ast.ImportFrom) and any(a.name == "GGUFReader" for a in node.names):
            found.append(f"{node.lineno}: imports GGUFReader (read headers with models/gguf_header.py)")
    return found


def test_bytes_per_expert_have_one_regex_and_one_reader() -> None:
    problems = [
        f"{path.relative_to(REPO).as_posix()}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(REPO).as_posix() != EXPERT_BYTES_MODULE
        for line in expert_regexes_and_readers(path)
    ]
    assert problems == []
    assert expert_regexes_and_readers(REPO / EXPERT_BYTES_MODULE)  # the walker sees its home's


def test_the_expert_walker_sees_a_second_regex_and_reader(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import re\nfrom gguf import GGUFReader\n"
        'R = re.compile(r"^blk\\.(\\d+)\\.ffn_(gate|up|down)_exps\\.weight$")\n'
        "def f(p):\n    return GGUFReader(p)\n"
    )
    assert [line.split(":")[0] for line in expert_regexes_and_readers(sample)] == ["2", "3", "5"]
