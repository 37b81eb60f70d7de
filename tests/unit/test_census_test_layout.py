"""A census of where unit tests live (issue 36 item 7, "tests findable from the code"): the unit
tests of appliance/<package>/<module>.py are tests/unit/<package>/test_<module>.py. A module
without that file is in EXEMPT with the true reason, which names the test files that do exercise
it where there are any; each file a reason names must exist. A new module without its test file
fails here, and so does an exemption whose module gained its file or is gone. The cross-cutting
censuses (CENSUSES: layout, lint, limits, single homes, docs, this file and the others listed)
keep their own names: each tests a rule of the whole tree, not one module."""

import re

from tests.conftest import REPO

# each `appliance <verb>` module is a thin click front: its verbs are run as a user runs them
# (tests.conftest.run_cli) in the tests of the stage they front, named in its reason
CLI = "`appliance {}` is run as a user runs it in "

EXEMPT = {
    "__main__": "`python -m appliance`: hands over to the CLI; every run_cli test starts it",
    "analysis/results": "the runner's analyze hook, run on real trials in tests/integration/test_runner.py",
    "analysis/run_summary": "the tables printed after a run (was analysis/report.py): placement_lines "
    "is asserted in tests/unit/analysis/test_placement.py",
    "attest/provenance": "reads a real image and container: tests/integration/test_provenance.py",
    "cli/bundle": CLI.format("bundle")
    + "tests/unit/attest/test_verify.py and tests/unit/attest/test_bundle.py",
    "cli/cluster": CLI.format("cluster")
    + "tests/unit/cluster/test_join_address.py and tests/unit/cluster/test_optional_ray.py",
    "cli/demo": "`appliance demo` runs under `make demo` in tests/e2e/conftest.py (Docker and a built "
    "engine); tests/e2e/test_demo.py reads what it made",
    "cli/doctor": CLI.format("doctor")
    + "tests/integration/test_doctor.py and tests/unit/test_edge_arguments.py",
    "cli/engine": CLI.format("engine")
    + "tests/unit/engine/test_lock.py and tests/unit/engine/test_source.py",
    "cli/engine_build": "`appliance engine build --local` builds the engine: its command is called in "
    "tests/e2e/test_tracer_build.py",
    "cli/evidence": CLI.format("evidence")
    + "tests/unit/evidence/test_compare.py and tests/unit/evidence/test_supersede.py",
    "cli/image": CLI.format("image")
    + "tests/unit/images/test_export_paths.py and tests/integration/test_image_base.py",
    "cli/keys": CLI.format("keys") + "tests/unit/attest/test_dsse.py",
    "cli/model": CLI.format("model")
    + "tests/unit/models/test_synth.py and tests/unit/models/test_full_synth.py",
    "cli/patches": CLI.format("patches") + "tests/unit/engine/test_patches.py",
    "cli/plan": CLI.format("plan") + "tests/unit/planner/test_plan.py",
    "cli/release_check": CLI.format("release-check") + "tests/unit/release/test_check.py",
    "cli/report": CLI.format("report") + "tests/unit/cli/test_report_cli.py",
    "cli/repro": CLI.format("repro") + "tests/unit/workflows/test_repro.py",
    "cli/run": CLI.format("run") + "tests/unit/cli/test_options.py and tests/unit/runs/test_profile.py",
    "cli/scale": CLI.format("scale") + "tests/unit/workflows/test_scale.py",
    "cluster/connect": "needs a Ray cluster (tests/e2e/test_cluster.py); its reach "
    "timeout is pinned in tests/unit/test_limit_edges_all.py",
    "cluster/node": "runs on a Ray node: tests/e2e/test_cluster.py",
    "cluster/resources": "the nodes' Ray resources, asserted in tests/unit/cluster/test_join.py",
    "cluster/status": "asks a live Ray cluster: tests/e2e/test_cluster.py",
    "core/digests": "sha256 helpers; the digests they give are asserted wherever a record "
    "names one, e.g. tests/unit/engine/test_source.py and tests/unit/runs/test_profile.py",
    "core/errors": "the exception classes, no behaviour of their own; how tests match "
    "their messages: tests/unit/test_raises_match.py",
    "core/nesting": "the depth check before the route-trace header is parsed (trace/format.py): a "
    "header nested 100k deep is refused in tests/unit/trace/test_hostile_traces.py",
    "core/progress": "progress callbacks, asserted through the CLI's printer in "
    "tests/unit/cli/test_progress.py",
    "engine/package_index": "downloads from a package index: used by engine/source.py's "
    "fetch, run in tests/unit/engine/test_source.py",
    "engine/tools": "the list of engine programs, no behaviour; its one home is held by "
    "tests/unit/core/test_single_homes.py",
    "host/docker": "needs a Docker engine: tests/integration/test_doctor.py and every "
    "Docker test through tests/conftest.py",
    "host/doctor": "needs a Docker engine: tests/integration/test_doctor.py",
    "images/archive": "exported archives: tests/unit/images/test_export_paths.py and "
    "tests/integration/test_image_archive.py (Docker)",
    "images/base": "base images: tests/unit/images/test_dockerfile.py and "
    "tests/integration/test_image_base.py (Docker)",
    "images/build": "builds an engine image with Docker: tests/integration/test_image_build.py",
    "images/builders": "the Dockerfile and builders an image build and a compile check share: "
    "tests/unit/images/test_dockerfile.py and tests/integration/test_image_build.py",
    "images/compile_check": "`appliance image check-compile` needs Docker and a second build base; no "
    "test runs it yet (tests/unit/core/test_readers_walk.py lists the files it reads)",
    "images/inspection": "`appliance image inspect` reads a built image: "
    "tests/integration/test_image_build.py (Docker)",
    "images/registry": "needs Docker and a registry: tests/integration/test_registry.py "
    "and tests/integration/test_image_choice.py",
    "images/selftest": "an image's self-test container: tests/unit/host/test_containers.py (its spec) and "
    "tests/integration/test_container_lifecycle.py (Docker)",
    "models/shapes": "the shapes synth writes, asserted in tests/unit/models/test_synth.py",
    "models/skeleton": "header-only skeletons, asserted in tests/unit/models/test_full_synth.py",
    "models/vocab": "the synthesized vocabulary, asserted in tests/unit/models/test_synth.py",
    "planner/render": "what `appliance plan` prints, asserted on the committed plans in "
    "tests/unit/planner/test_reference_plans.py",
    "runs/execute": "the run loop over real containers: tests/integration/test_runner.py; "
    "its trial line in tests/unit/runs/test_record.py",
    "runs/preview": "what `appliance run` and `sweep` print before the trials (was runs/report.py): "
    "asserted through `appliance sweep --dry-run` in tests/unit/cli/test_sweep.py",
    "runs/resume": "resuming, asserted with the seal check in tests/unit/workflows/test_resume_check.py",
    "runs/run_dir": "the run directory's layout, used by every run test, e.g. "
    "tests/unit/runs/test_record.py and tests/unit/attest/test_bundle.py",
    "runs/status": "the status enums, no behaviour; compared by member: tests/unit/core/test_verdicts.py",
    "trace/events": "the replay's events, asserted with the kernels in "
    "tests/unit/trace/test_kernels.py and tests/unit/trace/test_replay_bytes.py",
    "trace/lcs_replay": "`trace replay --engine libcachesim`: its refusals in "
    "tests/unit/trace/test_interchange.py, its limits in tests/unit/test_limit_edges_all.py",
    "trace/names": "policy and scope names, no behaviour; every name is replayed in "
    "tests/unit/trace/test_kernels.py",
    "workflows/demo": "`make demo` needs Docker and a built engine: tests/e2e/test_demo.py",
    "workflows/report_page": "`appliance report`'s verified HTML page (was workflows/report.py): "
    "tests/unit/analysis/test_html_report.py and tests/unit/cli/test_report_cli.py",
    "workflows/sweep": "a sweep needs Docker and a built engine: tests/e2e/test_cache_sweep.py "
    "and tests/e2e/test_demo.py",
}

# the cross-cutting censuses: each tests a rule of the whole tree, so none is named after a module
CENSUSES = {
    "tests/unit/test_census_test_layout.py": "where unit tests live (this file)",
    "tests/unit/test_layout.py": "stages import only earlier stages; no cycles",
    "tests/unit/test_lint.py": "ruff, the formatter and mypy",
    "tests/unit/test_docs.py": "the documents' commands run and their verbs exist",
    "tests/unit/test_limit_census.py": "every limit has an edge test or a reason",
    "tests/unit/test_limit_edges_all.py": "every input bound at its edge",
    "tests/unit/core/test_limit_edges.py": "every budget of the strict readers at its edge",
    "tests/unit/core/test_single_homes.py": "each shared fact defined once",
    "tests/unit/core/test_readers_walk.py": "every file read goes through the strict reader",
    "tests/unit/core/test_verdicts.py": "verdicts and statuses compared as enums",
    "tests/unit/test_raises_match.py": "every pytest.raises names its message",
    "tests/unit/test_regressions.py": "every input under tests/regressions/ refused in one line",
    "tests/unit/test_edge_arguments.py": "arguments checked at the edge, before expensive work",
    "tests/unit/test_mutation_config.py": "make mutation's configuration in step with the code",
    "tests/unit/test_plants.py": "make plant-bugs' plants in step with the code",
    "tests/unit/cli/test_uniform.py": "every verb's errors, --json and --key alike",
    "tests/unit/cli/test_key_options.py": "--key declared once per role",
    "tests/unit/cli/test_lazy_imports.py": "heavy libraries load only inside their verbs",
    "tests/unit/cli/test_strict_json_output.py": "every --json output is strict JSON",
    "tests/unit/cluster/test_optional_ray.py": "every module outside cluster/ imports without ray",
}

NAMED_FILE = re.compile(r"tests/[\w/]+\.py")


def unit_test_file(module: str) -> str:
    """The unit test file of the module <package>/<module> (appliance/<package>/<module>.py)."""
    package, _, name = module.rpartition("/")
    return "/".join(p for p in ("tests/unit", package, f"test_{name}.py") if p)


def modules() -> list[str]:
    """Every module of the package as <package>/<module>, without appliance/ and .py."""
    paths = (REPO / "appliance").rglob("*.py")
    return sorted(
        p.relative_to(REPO / "appliance").with_suffix("").as_posix() for p in paths if p.name != "__init__.py"
    )


def test_the_test_file_of_a_module() -> None:
    assert unit_test_file("trace/kernels") == "tests/unit/trace/test_kernels.py"
    assert unit_test_file("__main__") == "tests/unit/test___main__.py"


def test_every_module_has_its_unit_test_file_or_a_reason() -> None:
    missing = [m for m in modules() if m not in EXEMPT and not (REPO / unit_test_file(m)).is_file()]
    assert not missing, f"no unit test file: {', '.join(f'{m} ({unit_test_file(m)})' for m in missing)}"


def test_every_exemption_is_still_needed_and_names_files_that_exist() -> None:
    known = set(modules())
    for module, reason in EXEMPT.items():
        assert module in known, f"EXEMPT: {module} is not a module; remove it"
        assert not (REPO / unit_test_file(module)).is_file(), f"EXEMPT: {module} has {unit_test_file(module)}"
        assert len(reason) >= 20, f"EXEMPT: {module}: say why"
        for named in NAMED_FILE.findall(reason):
            assert (REPO / named).is_file(), f"EXEMPT: {module}: {named} does not exist"


def test_the_censuses_exist() -> None:
    assert [path for path in CENSUSES if not (REPO / path).is_file()] == []
