"""Compiled replay kernels are cached under the appliance cache: a second process loads them.
Small work never imports numba at all."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROBE = """
import json, sys, numpy as np
from appliance.trace import kernels
ptr, items = np.array([0, 2, 3, 5]), np.array([0, 1, 0, 1, 0])
small = kernels.lru_depths(ptr, items, 2).tolist()
numba_after_small = "numba" in sys.modules
kernels.compile_kernels()
compiled = kernels.lru_depths(ptr, items, 2).tolist()
print(json.dumps({"small": small, "compiled": compiled, "numba_after_small": numba_after_small,
                  "stats": kernels.cache_stats(),
                  "path": kernels._lru_depths.stats.cache_path}))
"""


def _probe(cache: Path) -> dict:  # type: ignore[type-arg]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(APPLIANCE_CACHE=str(cache), PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_second_process_loads_the_compiled_kernel_from_the_appliance_cache(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    assert first["numba_after_small"] is False
    assert first["small"] == first["compiled"] == [0, 0, 2, 2, 1]
    assert first["stats"] == {"_lru_depths": [0, 1]}
    assert first["path"].startswith(str(tmp_path / "numba"))
    assert any(p.suffix == ".nbc" for p in Path(first["path"]).iterdir())
    second = _probe(tmp_path)
    assert second["stats"] == {"_lru_depths": [1, 0]}
