"""A census of the package's limits: every module-level constant under appliance/ whose name
says it bounds something (MAX_, MIN_, LIMIT, DEADLINE, BUDGET, TIMEOUT, and the few others
named in OTHERS) is either pinned at its edge by a named test, which exists and names the
constant, or carries a written reason it is not an input bound. A new limit without either
fails here, and so does a table entry whose constant or test is gone."""

import ast
import functools
import re
from pathlib import Path

from tests.conftest import REPO

PATTERN = re.compile(r"MAX_|MIN_|LIMIT|DEADLINE|BUDGET|TIMEOUT")
OTHERS = {"appliance.planner.remote.RATE_GRACE_S", "appliance.cluster.join.HEAD_PROBE_S"}

ALL = "tests/unit/test_limit_edges_all.py::"
STRICT = "tests/unit/core/test_limit_edges.py::"

EDGE_TESTS = {
    "appliance.images.registry_api.MAX_MANIFEST_BYTES": "tests/unit/images/test_registry_api.py::"
    "test_a_manifest_at_the_size_limit_is_read_and_one_byte_more_refused",
    "appliance.runs.profile.MAX_READ_AHEAD": "tests/unit/runs/test_profile_read_ahead.py::"
    "test_read_ahead_at_the_limit_and_one_page_past",
    "appliance.analysis.html_report.MAX_PLOT_BYTES": ALL + "test_plot_budget_at_the_limit_and_one_past",
    "appliance.attest.dsse.MAX_KEY_FILE_BYTES": ALL + "test_public_key_file_budget_at_the_limit_and_one_past",
    "appliance.attest.dsse.MAX_PAYLOAD_BYTES": ALL
    + "test_attestation_payload_budget_at_the_limit_and_one_past",
    "appliance.attest.trust.MIN_ID_PREFIX": ALL + "test_key_id_prefix_at_the_limit_and_one_short",
    "appliance.attest.verify.MAX_SEAL_BYTES": "tests/unit/attest/test_verify_checks.py::"
    "test_seal_budget_at_the_limit_and_one_past",
    "appliance.cli.options.MAX_COUNT": ALL + "test_counts_at_the_limit_and_one_past",
    "appliance.cli.options.MAX_ATTEMPTS": ALL + "test_max_attempts_at_the_limit_and_one_past",
    "appliance.cli.trace.MAX_CAPACITY": ALL + "test_replay_capacity_at_the_limit_and_one_past",
    "appliance.cli.trace.MAX_BUDGET_BYTES": "tests/unit/trace/test_replay_bytes.py::"
    "test_cli_budget_parsing_at_its_limit_and_one_past",
    "appliance.cluster.connect.REACH_TIMEOUT_S": ALL + "test_cluster_reach_timeout_at_the_limit_and_past",
    "appliance.cluster.join.MAX_PORT": ALL + "test_port_at_the_limit_and_one_past",
    "appliance.cluster.join.RAY_START_DEADLINE_S": ALL
    + "test_ray_start_deadline_is_its_default_and_a_start_within_it_succeeds",
    "appliance.cluster.join.HEAD_PROBE_S": ALL
    + "test_head_probe_timeout_is_its_default_and_ends_a_silent_head",
    "appliance.core.limits.MAX_REPEATS": ALL + "test_seed_and_repeats_at_the_limit_and_one_past",
    "appliance.core.limits.MAX_SEED": ALL + "test_seed_and_repeats_at_the_limit_and_one_past",
    "appliance.core.limits.MAX_N_PREDICT": ALL + "test_tokens_per_trial_at_the_limit_and_one_past",
    "appliance.core.limits.MAX_MODEL_LAYERS": ALL
    + "test_the_planner_reads_llama_cpps_limits_at_the_edge_and_refuses_past",
    "appliance.core.limits.MAX_MODEL_EXPERTS": ALL
    + "test_the_synthesizer_takes_llama_cpps_limits_and_refuses_past",
    "appliance.core.strict_load.MAX_BYTES": STRICT + "test_default_byte_budget_at_the_limit_and_one_past",
    "appliance.core.strict_load.MAX_DEPTH": STRICT + "test_json_depth_at_the_limit_and_one_past",
    "appliance.core.strict_load.MAX_NODES": STRICT + "test_yaml_alias_expansion_at_the_limit_and_one_past",
    "appliance.core.strict_load.MAX_INT_DIGITS": STRICT + "test_integer_digits_at_the_limit_and_one_past",
    "appliance.core.validation.MAX_ERRORS": "tests/unit/core/test_validation.py::"
    "test_validate_raises_one_line_naming_the_file_and_counting_the_rest",
    "appliance.engine.lock.MAX_LOCK_BYTES": STRICT + "test_lock_budget_at_the_limit_and_one_past",
    "appliance.evidence.finding.MAX_FINDING_BYTES": STRICT + "test_finding_budget_at_the_limit_and_one_past",
    "appliance.images.archive.MAX_SIDECAR_BYTES": ALL + "test_image_sidecar_budget_at_the_limit_and_one_past",
    "appliance.models.gguf_header.HEADER_BUDGET": ALL
    + "test_header_budget_is_the_default_and_its_edge_holds",
    "appliance.models.gguf_header.MAX_ALIGNMENT": ALL + "test_alignment_at_the_limit_and_one_past",
    "appliance.models.gguf_header.MAX_DIM": ALL + "test_tensor_elements_at_the_limit_and_one_past",
    "appliance.planner.accounting.MAX_HPARAM": "tests/unit/planner/test_accounting.py::"
    "test_metadata_numbers_at_their_edges_and_per_layer_lists",
    "appliance.planner.remote.DEADLINE_S": ALL + "test_remote_limits_default_to_their_homes",
    "appliance.planner.remote.TOTAL_DEADLINE_S": ALL
    + "test_remote_whole_read_deadline_at_the_limit_and_past",
    "appliance.planner.remote.MIN_RATE": ALL + "test_remote_minimum_rate_at_the_limit_and_below",
    "appliance.planner.remote.RATE_GRACE_S": ALL + "test_remote_minimum_rate_at_the_limit_and_below",
    "appliance.planner.remote.MAX_REDIRECTS": ALL + "test_remote_redirects_at_the_limit_and_one_past",
    "appliance.runs.memory_points.MAX_FRACTION": ALL + "test_memory_fraction_at_the_limit_and_one_past",
    "appliance.runs.profile.MAX_PROFILE_BYTES": STRICT + "test_profile_budget_at_the_limit_and_one_past",
    "appliance.runs.profile.DOCKER_MIN_MEMORY": ALL
    + "test_profile_memory_at_the_engines_floor_and_one_below",
    "appliance.runs.profile.MAX_SIZE": ALL + "test_profile_size_at_the_limit_and_one_past",
    "appliance.trace.format.MAX_HEADER_BYTES": ALL + "test_trace_header_bytes_at_the_limit_and_one_past",
    "appliance.trace.format.MAX_TRACE_LAYERS": ALL + "test_trace_header_counts_at_the_limit_and_one_past",
    "appliance.trace.format.MAX_TRACE_EXPERTS": ALL + "test_trace_header_counts_at_the_limit_and_one_past",
    "appliance.trace.format.MAX_EXPERT_USED": ALL + "test_trace_header_counts_at_the_limit_and_one_past",
    "appliance.trace.format.MAX_OBJECTS": ALL + "test_trace_objects_at_the_limit_and_one_past",
    "appliance.trace.interchange.MAX_IMPORT_BYTES": ALL
    + "test_trace_import_budget_at_the_limit_and_one_past",
    "appliance.trace.interchange.MAX_ORACLE_SIZE": ALL + "test_oracle_size_at_the_limit_and_one_past",
    "appliance.trace.lcs_replay.MIN_CAPACITY": ALL + "test_libcachesim_capacity_at_its_floor_and_one_below",
}

NOT_INPUT_BOUNDS = {
    "appliance.images.registry_api.REGISTRY_TIMEOUT_S": "the default wait for a registry's answer, "
    "`appliance pull --timeout` sets it; tests/integration/test_release_publish.py runs a silent "
    "registry with --timeout 1",
    "appliance.runs.device_server.READY_TIMEOUT_S": "how long a trial waits for its stand-in device "
    "server to listen: it needs Docker and the engine image; tests/e2e/test_stand_in_trial.py starts it",
    "appliance.cli.progress.LINE_MIN_SECONDS": "how often a progress line is printed; it bounds no input",
    "appliance.cluster.run.DEFAULT_MAX_ATTEMPTS": "the default of --max-attempts, which the user overrides; "
    "the option's range is MAX_ATTEMPTS",
    "appliance.host.cgroups.BLKIO_UNLIMITED_BPS": "the rate written to a cgroup for 'no I/O limit'; it is "
    "output, not a bound on what the appliance reads",
    "appliance.images.labels.MIN_DRIVER": "the name of an image label, not a number",
    "appliance.release.check.DEFAULT_MAX_BYTES": "the default of --max-bytes (large committed files are "
    "reported), which the user overrides",
    "appliance.runs.sweep.DEFAULT_MAX_HOURS": "the default of --max-hours (a sweep's planned duration), "
    "which the user overrides",
    "appliance.cluster.preflight.PROBE_TIMEOUT_S": "how long the preflight waits on Ray nodes' probes: it "
    "needs a Ray cluster, which the unit tests do not start; tests/e2e/test_cluster.py runs it, not at "
    "its edge",
    "appliance.cluster.status.STATUS_TIMEOUT_S": "how long `cluster status` waits on Ray nodes: it needs a "
    "Ray cluster, which the unit tests do not start; tests/e2e/test_cluster.py runs it, not at its edge",
    "appliance.engine.package_index.TIMEOUT_S": "a socket timeout towards the package index while an "
    "engine image is built; no user input passes through it, and tests talk to no index",
    "appliance.engine.source.GIT_TIMEOUT_S": "a timeout for git commands on the llama.cpp checkout while an "
    "engine image is built; it bounds no user input",
    "appliance.release.check.SCAN_LIMIT": "git blobs over this size are reported as large and not read for "
    "credentials; it bounds the release check's memory over the project's own history, not user input",
    "appliance.models.full_walk.REVISIT_MIN_GAP": "a fitted constant of the walk router's design (the "
    "least gap back a revisit reaches, in walk tokens); it bounds no user input",
}


@functools.cache
def _constants() -> dict[str, tuple[Path, int]]:
    found = {}
    for path in sorted((REPO / "appliance").rglob("*.py")):
        text = path.read_text()
        if not re.search(r"^[A-Z][A-Z0-9_]* *[:=]", text, re.M):  # no module-level constant: skip the parse
            continue
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.parse(text).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    name = f"{module}.{target.id}"
                    if PATTERN.search(target.id) or name in OTHERS:
                        found[name] = (path, node.lineno)
    return found


@functools.cache
def _test_functions(path: Path) -> dict[str, str]:
    """Each test function's source, its decorators (parametrize tables) included."""
    lines = path.read_text().splitlines()
    return {
        node.name: "\n".join(
            lines[min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 : node.end_lineno]
        )
        for node in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def test_every_limit_has_an_edge_test_or_a_reason() -> None:
    constants = _constants()
    assert len(constants) >= 45
    unaccounted = sorted(set(constants) - set(EDGE_TESTS) - set(NOT_INPUT_BOUNDS))
    assert unaccounted == [], "add an edge test (EDGE_TESTS) or a reason (NOT_INPUT_BOUNDS) for these"
    stale = sorted((set(EDGE_TESTS) | set(NOT_INPUT_BOUNDS)) - set(constants))
    assert stale == [], "these constants are gone: drop them from the census"
    assert set(EDGE_TESTS).isdisjoint(NOT_INPUT_BOUNDS)
    assert all(len(reason) > 30 for reason in NOT_INPUT_BOUNDS.values())


def test_each_edge_test_exists_and_reads_its_limit_by_name() -> None:
    missing = []
    for constant, node in EDGE_TESTS.items():
        file, _, function = node.partition("::")
        functions = _test_functions(REPO / file)
        name = constant.rsplit(".", 1)[1]
        if function not in functions:
            missing.append(f"{constant}: {node} does not exist")
        elif name not in functions[function]:
            missing.append(f"{constant}: {node} never names {name}")
    assert missing == []


def test_the_trace_readers_share_the_strict_loaders_depth() -> None:
    """One fact, one home: no second module-level depth limit beside strict_load.MAX_DEPTH."""
    depths = [name for name in _constants() if re.search(r"\.MAX_(DEPTH|NESTING)$", name)]
    assert depths == ["appliance.core.strict_load.MAX_DEPTH"]
