"""ray is an optional extra: every module outside appliance.cluster imports without it, and
the CLI says how to install it instead of failing with a traceback."""

import os
import subprocess
import sys

from tests.conftest import REPO

BLOCK_RAY = "import sys; sys.modules['ray'] = None\n"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_RAY + code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )


def test_every_module_but_the_cluster_stage_imports_without_ray() -> None:
    result = run_python(
        "import importlib, pathlib\n"
        "names = []\n"
        "for path in sorted(pathlib.Path('appliance').rglob('*.py')):\n"
        "    parts = list(path.with_suffix('').parts)\n"
        "    if parts[-1] == '__init__': parts.pop()\n"
        "    if parts[-1] == '__main__' or parts[:2] == ['appliance', 'cluster']: continue\n"
        "    importlib.import_module('.'.join(parts)); names.append('.'.join(parts))\n"
        "assert 'ray' not in {m for m in sys.modules if sys.modules[m] is not None}\n"
        "print(len(names))\n"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout) > 90


def test_the_cluster_verbs_say_how_to_install_ray() -> None:
    result = run_python(
        "from appliance.cli import main; sys.argv = ['appliance', 'cluster', "
        "'status', '--address', '127.0.0.1:9']; main()"
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: Ray is not installed: pip install "
        "'moe-expert-cache-appliance[cluster]' (or .[cluster] in "
        "the checkout)"
    )
