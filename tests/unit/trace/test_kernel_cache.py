"""Compiled replay kernels are cached under the appliance cache: a second process loads them."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROBE = """
import json, numpy as np
from appliance.trace import kernels
depths = kernels.lru_depths(np.array([0, 2, 3, 5]), np.array([0, 1, 0, 1, 0]), 2)
stats = kernels.lru_depths.stats
print(json.dumps({"depths": depths.tolist(), "path": stats.cache_path,
                  "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values())}))
"""


def _probe(cache: Path) -> dict:  # type: ignore[type-arg]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(APPLIANCE_CACHE=str(cache), PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_second_process_loads_the_compiled_kernel_from_the_appliance_cache(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    assert first["misses"] == 1 and first["hits"] == 0
    assert first["path"].startswith(str(tmp_path / "numba"))
    assert any(p.suffix == ".nbc" for p in Path(first["path"]).iterdir())
    second = _probe(tmp_path)
    assert second["hits"] == 1 and second["misses"] == 0
    assert second["depths"] == first["depths"] == [0, 0, 2, 2, 1]
