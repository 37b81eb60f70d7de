"""An engine image's self-test (`appliance image selftest`): each tool runs, every library
resolves, GPU images carry the CUDA backend, the user is not root and no compiler is left.
"""

from dataclasses import dataclass
from typing import Any

from appliance.core.errors import ApplianceError
from appliance.engine.tools import IMAGE_BIN_DIR, IMAGE_LIB_DIR, IMAGE_TOOLS
from appliance.host.containers import Kind, Lifecycle
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.base import local_image


@dataclass(frozen=True)
class SelftestCheck:
    name: str
    ok: bool
    detail: str


def _exec(container: Any, cmd: list[str]) -> tuple[int, str]:
    result = container.exec_run(cmd, demux=False)
    return int(result.exit_code), (result.output or b"").decode(errors="replace")


# The one library an image may leave unresolved: the NVIDIA driver's, which the container
# runtime mounts from the host when a GPU is requested.
DRIVER_LIBRARY = "libcuda.so.1"
CUDA_BACKEND_MODULE = f"{IMAGE_LIB_DIR}/libggml-cuda.so"


def _unresolved(ldd_output: str) -> list[str]:
    """Libraries ldd could not find, the driver's left out."""
    return [
        line.split()[0]
        for line in ldd_output.splitlines()
        if "not found" in line and line.split()[0] != DRIVER_LIBRARY
    ]


def selftest_spec(ref: str) -> dict[str, Any]:
    """The self-test kind's configure hook (host.containers): the image, idle while the checks
    exec into it."""
    return {"image": ref, "command": ["sleep", "600"], "detach": True}


def selftest(ref: str, client: Any | None = None) -> list[SelftestCheck]:
    """Run each tool's --help; ldd every tool and every library of the image (only the driver's
    libcuda.so.1 may be missing); the CUDA backend module in GPU images; non-root, no compiler."""
    import docker.errors

    client = client or docker_client()
    image = local_image(client, ref)
    if image is None:
        raise ApplianceError(f"no local image {ref}: build or pull it first")
    gpu = bool((image.labels or {}).get(L.CUDA_VERSION))
    checks: list[SelftestCheck] = []
    with Lifecycle(client, Kind.SELFTEST) as box:
        try:
            container = box.start(selftest_spec(ref))
        except docker.errors.APIError as exc:
            raise ApplianceError(f"cannot start {ref}: {exc.explanation or exc}") from None
        for tool in IMAGE_TOOLS:
            code, out = _exec(container, [tool, "--help"])
            first = next((line for line in out.splitlines() if line.strip()), "")
            checks.append(SelftestCheck(f"{tool} --help", code == 0, f"exit {code}: {first[:80]}"))
        # files only: a library's version links would repeat its ldd
        listing = f'for f in {IMAGE_LIB_DIR}/*.so*; do [ -L "$f" ] || echo "$f"; done'
        code, out = _exec(container, ["sh", "-c", listing])
        libraries = out.split() if code == 0 else []
        for path in [f"{IMAGE_BIN_DIR}/{tool}" for tool in IMAGE_TOOLS] + libraries:
            code, out = _exec(container, ["ldd", path])
            missing = _unresolved(out)
            libs = len([line for line in out.splitlines() if "=>" in line])
            checks.append(
                SelftestCheck(
                    f"{path.rsplit('/', 1)[1]} libraries",
                    code == 0 and not missing,
                    f"missing: {', '.join(missing)}" if missing else f"{libs} resolved",
                )
            )
        if gpu:
            present = CUDA_BACKEND_MODULE in libraries
            checks.append(
                SelftestCheck("CUDA backend module", present, CUDA_BACKEND_MODULE if present else "missing")
            )
        code, out = _exec(container, ["id", "-u"])
        checks.append(
            SelftestCheck("non-root user", code == 0 and out.strip() not in ("", "0"), f"uid {out.strip()}")
        )
        found = []
        for compiler in ("cc", "gcc", "g++", "c++", "clang", "nvcc", "cmake"):
            if _exec(container, ["sh", "-c", f"command -v {compiler}"])[0] == 0:
                found.append(compiler)
        checks.append(
            SelftestCheck("no compiler", not found, f"found {', '.join(found)}" if found else "none found")
        )
    return checks
