"""The cpu engine image, built once per test run (reused while its inputs are unchanged).

Integration and e2e conftests get it with `from tests.engine_image import engine_image_cpu`
(a session fixture giving the image tag); `engine_image_cpu_cache` is the same image with the
expert cache (experimental patch 0004) on top, what profile tiny-oversub-cache runs on. Both
build from the b10229 stand-in, the source these machines can verify; a build that fails fails
the tests that need it.
"""

from functools import cache

import pytest

from appliance.engine.lock import load_lock
from appliance.images.build import BuildResult, build_image

STAND_IN = "b10229"
CACHE_PATCH = "0004-expert-cache.patch"


@cache
def cpu_engine_image() -> BuildResult:
    """Build (or reuse) the cpu engine image from the repository's lock; cached per process."""
    return build_image(load_lock(), "cpu", STAND_IN)


@pytest.fixture(scope="session")
def engine_image_cpu(docker_client) -> str:  # type: ignore[no-untyped-def]
    """Tag of the cpu engine image (needs a Docker engine: fails under CI, skips elsewhere)."""
    return cpu_engine_image().tag


@cache
def cpu_cache_engine_image() -> BuildResult:
    """The cpu engine image with the expert cache patch, built (or reused) once per process."""
    return build_image(load_lock(), "cpu", STAND_IN, [CACHE_PATCH])


@pytest.fixture(scope="session")
def engine_image_cpu_cache(docker_client) -> str:  # type: ignore[no-untyped-def]
    """Tag of the cpu engine image with 0004 (needs a Docker engine, as engine_image_cpu)."""
    return cpu_cache_engine_image().tag
