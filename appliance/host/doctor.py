"""`appliance doctor`: what this machine can run, one line per check with the fix."""

import shutil
from dataclasses import asdict, dataclass
from typing import Any

from appliance.core.checks import Check, Status, worst
from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock
from appliance.host.docker import buildkit_client, connect, docker_endpoint, engine_fix, one_line
from appliance.host.gpu import Gpu, NvmlUnavailable, detect_gpus, driver_satisfies, fitting_target
from appliance.host.meminfo import meminfo_bytes

PASS, WARN, FAIL = Status.PASS, Status.WARN, Status.FAIL


@dataclass
class Report:
    checks: list[Check]
    target: str
    facts: dict[str, Any]

    @property
    def ok(self) -> bool:
        return worst(self.checks) is not FAIL

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "target": self.target,
            "facts": self.facts,
            "checks": [check.as_dict() for check in self.checks],
        }


def _docker_facts() -> tuple[Check, dict[str, Any]]:
    client, problem = connect()
    try:
        if client is None:
            raise ApplianceError(problem or "no engine")
        info = client.info()
        version = client.version()
    except Exception as exc:  # noqa: BLE001 - any failure means the engine is not usable
        detail = problem or f"Docker engine at {docker_endpoint()}: {one_line(exc)}"
        return (
            Check("docker engine", FAIL, detail, fix=engine_fix()),
            {"docker_endpoint": docker_endpoint()},
        )
    facts = {
        "docker_endpoint": docker_endpoint(),
        "docker_version": version.get("Version"),
        "cgroup_version": str(info.get("CgroupVersion") or "1"),
        "cgroup_driver": info.get("CgroupDriver"),
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
    }
    detail = (
        f"Docker {facts['docker_version']} at {facts['docker_endpoint']}, cgroup "
        f"v{facts['cgroup_version']} ({facts['cgroup_driver']} driver)"
    )
    return Check("docker engine", PASS, detail), facts


def _buildkit_check() -> Check:
    found = buildkit_client()
    if found is None:
        return Check(
            "buildkit client",
            WARN,
            "no docker client with BuildKit found",
            fix="install Debian's docker.io or the buildx plugin; the SDK's classic builder is used",
        )
    path, how = found
    return Check("buildkit client", PASS, f"{path} ({how})")


def _nvidia_runtime_check(runtimes: list[str]) -> Check:
    if "nvidia" in runtimes or shutil.which("nvidia-container-runtime") or shutil.which("nvidia-ctk"):
        return Check("nvidia container runtime", PASS, "present")
    return Check(
        "nvidia container runtime",
        WARN,
        "absent: GPU targets cannot run here",
        fix="install nvidia-container-toolkit for sm89/sm120 runs; cpu runs need nothing",
    )


def _gpu_checks(lock: Lock) -> tuple[list[Check], list[Gpu], str]:
    try:
        gpus = detect_gpus()
    except NvmlUnavailable as exc:
        return (
            [
                Check(
                    "gpu",
                    WARN,
                    f"NVML unavailable ({exc}): no NVIDIA GPU visible",
                    fix="fine for the cpu target; for GPUs install the NVIDIA driver",
                )
            ],
            [],
            "cpu",
        )
    if not gpus:
        return [Check("gpu", WARN, "NVML found no GPU", fix="fine for the cpu target")], [], "cpu"
    checks = [
        Check(
            "gpu",
            PASS,
            f"GPU {g.index}: {g.name}, compute {g.compute_capability}, "
            f"driver {g.driver}, {g.memory_bytes / 2**30:.1f} GiB",
        )
        for g in gpus
    ]
    target_name = fitting_target(gpus, lock)
    target = lock.targets[target_name]
    if target.cuda:
        if driver_satisfies(gpus[0].driver, target.cuda.min_driver):
            checks.append(
                Check(
                    "driver",
                    PASS,
                    f"{gpus[0].driver} >= {target.cuda.min_driver} "
                    f"(CUDA {target.cuda.version}, {target_name})",
                )
            )
        else:
            checks.append(
                Check(
                    "driver",
                    FAIL,
                    f"{gpus[0].driver} < {target.cuda.min_driver} needed by "
                    f"{target_name} (CUDA {target.cuda.version})",
                    fix=f"upgrade the NVIDIA driver to {target.cuda.min_driver} or newer",
                )
            )
    return checks, gpus, target_name


def _swap_check() -> tuple[Check, int]:
    swap_bytes = meminfo_bytes("SwapTotal") or 0
    if swap_bytes:
        return Check(
            "swap",
            WARN,
            f"on ({swap_bytes // 2**20} MiB)",
            fix="runs set memswap_limit == mem_limit, so swap is not used by trials; "
            "disable swap for host-level comparisons",
        ), swap_bytes
    return Check("swap", PASS, "off"), 0


def _fincore_check() -> Check:
    if shutil.which("fincore"):
        return Check("fincore", PASS, shutil.which("fincore") or "")
    return Check(
        "fincore",
        WARN,
        "not found; page residency is measured with mincore instead",
        fix="install util-linux (fincore) to cross-check residency",
    )


def diagnose(lock: Lock) -> Report:
    docker_check, facts = _docker_facts()
    checks = [docker_check, _buildkit_check(), _nvidia_runtime_check(facts.get("runtimes", []))]
    gpu_checks, gpus, target = _gpu_checks(lock)
    checks += gpu_checks
    swap, swap_bytes = _swap_check()
    checks += [swap, _fincore_check(), Check("target", PASS, f"{target} fits this machine")]
    facts.update(swap_bytes=swap_bytes, gpus=[asdict(g) for g in gpus])
    return Report(checks, target, facts)
