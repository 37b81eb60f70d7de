"""compile_kernels in this process (test_kernel_modes and test_kernel_cache check the compiled
replay in a subprocess, where a mutation of this module is never seen): every function marked
@kernel, and only those, is replaced by a numba dispatcher of itself with its options, cached
under the appliance cache unless numba already has a cache directory. numba compiles lazily, on
a dispatcher's first call, so nothing is compiled here; the module is put back afterwards."""

import ast
import inspect
from pathlib import Path

import pytest

from appliance.trace import kernels


def _marked_in_source() -> list[str]:
    """The functions of kernels.py decorated with @kernel(...), read from its source."""
    tree = ast.parse(Path(inspect.getfile(kernels)).read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "kernel"
            for d in node.decorator_list
        )
    ]


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """The kernels module as plain Python, as before compile_kernels (the trace tests' conftest
    compiles them for the session), numba's cache dir unset; all put back afterwards."""
    from numba.core import config

    for func, _ in kernels._KERNELS:
        monkeypatch.setattr(kernels, func.__name__, func)
    monkeypatch.setattr(kernels, "_compiled", False)
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def test_every_marked_function_is_a_kernel_with_its_options() -> None:
    assert [func.__name__ for func, _ in kernels._KERNELS] == _marked_in_source()
    options = {func.__name__: opts for func, opts in kernels._KERNELS}
    assert options["_unlink"] == {"inline": "always"} and options["_lru_depths"] == {}


def test_compile_kernels_replaces_each_kernel_by_its_cached_dispatcher(
    restored: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from numba.core import config
    from numba.core.registry import CPUDispatcher

    plain = {func.__name__: func for func, _ in kernels._KERNELS}
    assert all(getattr(kernels, name) is func for name, func in plain.items())
    assert kernels.cache_stats() == {}  # nothing compiled, nothing counted
    kernels.compile_kernels()
    assert kernels._compiled is True
    assert str(tmp_path / "cache" / "numba") == config.CACHE_DIR
    for func, options in kernels._KERNELS:
        dispatcher = getattr(kernels, func.__name__)
        assert isinstance(dispatcher, CPUDispatcher), func.__name__
        assert dispatcher.py_func is func
        assert dispatcher.targetoptions["nopython"] is True, func.__name__
        assert {k: dispatcher.targetoptions[k] for k in options} == options, func.__name__
        assert str(dispatcher.stats.cache_path).startswith(str(tmp_path / "cache" / "numba")), func.__name__
    first = {name: getattr(kernels, name) for name in plain}
    kernels.compile_kernels()  # once per process
    assert all(getattr(kernels, name) is first[name] for name in plain)


def test_a_cache_directory_numba_already_has_wins(restored: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from numba.core import config

    restored.setattr(config, "CACHE_DIR", str(tmp_path / "numba-own"))
    kernels.compile_kernels()
    assert str(tmp_path / "numba-own") == config.CACHE_DIR


def test_small_work_stays_plain_python(restored: pytest.MonkeyPatch) -> None:
    kernels._prepare(kernels.COMPILE_ABOVE_REQUESTS)
    assert kernels._compiled is False
    kernels._prepare(kernels.COMPILE_ABOVE_REQUESTS + 1)
    assert kernels._compiled is True
