"""host/containers.py: every container the appliance starts goes through one lifecycle, which
gives it the one hardening. The census finds every container start in the code; the rest checks
the hardening merge, its refusals and the three kinds' configure hooks."""

import ast
from pathlib import Path

import pytest

from appliance.attest.provenance import probe_spec
from appliance.core.errors import ApplianceError
from appliance.host.containers import HARDENING, WEAKENING, Kind, hardened, hardening_cli_args
from appliance.images.selftest import selftest_spec
from appliance.runs.memory_points import SweepLimit
from appliance.runs.plan import (
    ContainerSettings,
    LlamaMoeTraceEngine,
    container_spec,
    docker_cli_equivalent,
    sweep_plan,
)
from appliance.runs.profile import load_profile
from tests.conftest import REPO

LIFECYCLE = "appliance/host/containers.py"
# Where code that ships could start a container: the package, the benchmarks, the fuzzers.
SCANNED = ("appliance", "bench", "fuzz")


def container_starts(source: str) -> list[str]:
    """Each call that makes a container: `<x>.containers.run/create(...)` or the low-level
    `<x>.create_container(...)`, as "line:call"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        high = func.attr in ("run", "create") and isinstance(func.value, ast.Attribute)
        if (high and func.value.attr == "containers") or func.attr == "create_container":  # type: ignore[union-attr]
            found.append(f"{node.lineno}:{func.attr}")
    return found


def test_every_container_start_is_in_the_lifecycle_module() -> None:
    starts = {}
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            calls = container_starts(path.read_text())
            if calls:
                starts[str(path.relative_to(REPO))] = [c.split(":")[1] for c in calls]
    assert starts == {LIFECYCLE: ["create"]}


def test_the_census_sees_each_way_to_start_a_container() -> None:
    source = (
        "client.containers.run('img')\n"
        "docker_client.containers.create(image='img')\n"
        "self.client.api.create_container('img')\n"
        "client.containers.get('x').remove(force=True)\n"
        "subprocess.run(['ls'])\n"
    )
    assert container_starts(source) == ["1:run", "2:create", "3:create_container"]


def test_every_kind_is_started_by_a_module_of_its_own() -> None:
    users = {kind: [] for kind in Kind}
    for path in sorted((REPO / "appliance").rglob("*.py")):
        if str(path.relative_to(REPO)) == LIFECYCLE:
            continue
        text = path.read_text()
        for kind in Kind:
            if f"Kind.{kind.name}" in text:
                users[kind].append(str(path.relative_to(REPO)))
    assert users == {
        Kind.TRIAL: ["appliance/runs/plan.py", "appliance/runs/trial.py"],
        Kind.SELFTEST: ["appliance/images/selftest.py"],
        Kind.PROBE: ["appliance/attest/provenance.py"],
        Kind.DEVICE_SERVER: ["appliance/runs/device_server.py"],
    }


def test_hardened_adds_the_hardening_after_the_kinds_own_keys_and_is_idempotent() -> None:
    spec = hardened(Kind.PROBE, {"image": "img", "user": "0"})
    assert list(spec) == ["image", "user", "network_mode", "cap_drop", "security_opt", "read_only"]
    assert spec == {
        "image": "img",
        "user": "0",
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
    }
    assert hardened(Kind.PROBE, spec) == spec
    spec["cap_drop"].append("NONE")  # the caller's copy: the one hardening stays as it is
    assert HARDENING["cap_drop"] == ["ALL"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"network_mode": "host"}, "network_mode"),
        ({"read_only": False}, "read_only"),
        ({"cap_drop": []}, "cap_drop"),
        ({"security_opt": ["seccomp=unconfined"]}, "security_opt"),
        ({"network": "bridge"}, "network"),
        ({"cap_add": ["SYS_ADMIN"]}, "cap_add"),
        ({"privileged": True}, "privileged"),
    ],
)
def test_a_spec_that_weakens_the_hardening_is_refused(extra: dict[str, object], named: str) -> None:
    message = (
        f"the image self-test container's spec sets {named}: the hardening is "
        "appliance/host/containers.py's HARDENING; declare an exception there, with why"
    )
    with pytest.raises(ApplianceError, match=f"^{message}$"):
        hardened(Kind.SELFTEST, {"image": "img", **extra})
    assert named in HARDENING or named in WEAKENING


def test_the_printed_docker_run_carries_the_same_hardening() -> None:
    assert hardening_cli_args() == [
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--read-only",
    ]


def trial_spec(tmp_path: Path) -> dict[str, object]:
    profile = load_profile("tiny-oversub")
    trial = sweep_plan(profile, [SweepLimit(100 << 20, "100MiB")], repeats=1)[0]
    settings = ContainerSettings(
        models_dir=tmp_path, block_device=None, cgroup_version=2, gpu_device_ids=None
    )
    return container_spec(profile, LlamaMoeTraceEngine("img:tag"), trial, settings, tmp_path / "s", "n", {})


def test_each_kinds_configure_hook_gives_a_hardened_spec(tmp_path: Path) -> None:
    trial = trial_spec(tmp_path)
    assert {k: trial[k] for k in HARDENING} == dict(HARDENING)
    assert hardened(Kind.TRIAL, trial) == trial  # nothing the lifecycle adds at start
    assert trial["mem_limit"] == trial["memswap_limit"] == 100 << 20
    line = docker_cli_equivalent(trial)  # type: ignore[arg-type]
    assert " --network none --cap-drop ALL --security-opt no-new-privileges --read-only " in line
    for spec in (selftest_spec("img"), probe_spec("sha256:abc", ["/bin/sh"], None)):
        assert not set(spec) & (set(HARDENING) | set(WEAKENING))  # the lifecycle adds the hardening
        assert hardened(Kind.PROBE, spec) == {**spec, **HARDENING}


def test_the_hardening_is_spelled_only_in_the_lifecycle_module() -> None:
    spelled = {
        str(path.relative_to(REPO))
        for path in (REPO / "appliance").rglob("*.py")
        if any(word in path.read_text() for word in ("no-new-privileges", "cap_drop", "security_opt"))
    }
    assert spelled == {LIFECYCLE}
