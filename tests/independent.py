"""Run tests/independent_verifier.py the way a third party would: isolated, appliance unimportable."""

import ast
import subprocess
import sys
from pathlib import Path

VERIFIER = Path(__file__).with_name("independent_verifier.py")


def imported_modules() -> set[str]:
    """Top-level names of every module the independent verifier imports."""
    names = set()
    for node in ast.walk(ast.parse(VERIFIER.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def run_independent_verifier(bundle: Path, public_key: Path) -> subprocess.CompletedProcess[str]:
    """python -I (no PYTHONPATH, no script directory) with `appliance` made unimportable."""
    code = (
        "import sys; sys.modules['appliance'] = None; "
        f"sys.argv = ['verifier', {str(bundle)!r}, {str(public_key)!r}]; "
        f"exec(compile(open({str(VERIFIER)!r}).read(), 'independent_verifier.py', 'exec'))"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
