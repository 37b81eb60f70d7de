"""The trace tests exercise the compiled kernels (small inputs would otherwise run as plain
Python); test_kernel_modes.py pins the plain-Python path to the compiled one."""

import pytest

from appliance.trace import kernels


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    kernels.compile_kernels()
