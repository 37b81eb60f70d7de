"""A verifier written from docs/attestation.md with the standard library and `cryptography`
accepts the appliance's bundles and refuses every tampered one."""

import shutil
import sys
from pathlib import Path

import pytest

from tests.independent import imported_modules, run_independent_verifier
from tests.tamper import Keys, another_genuine_bundle, cases

CASE_NAMES = [case.name for case in cases(Path("other"))]


def test_it_imports_only_the_standard_library_and_cryptography() -> None:
    assert imported_modules() - set(sys.stdlib_module_names) == {"cryptography"}


def test_it_accepts_a_genuine_bundle(genuine: Path, keys: Keys) -> None:
    result = run_independent_verifier(genuine, keys.trusted.public)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == f"accepted {keys.trusted.keyid}\n"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_it_refuses_every_tamper_case(name: str, genuine: Path, keys: Keys, tmp_path: Path) -> None:
    other = another_genuine_bundle(genuine, tmp_path, keys)
    bundle = tmp_path / "bundle"
    shutil.copytree(genuine, bundle, symlinks=True)
    next(c for c in cases(other) if c.name == name).tamper(bundle, keys)
    result = run_independent_verifier(bundle, keys.trusted.public)
    assert result.returncode == 1, result.stdout
    assert "accepted" not in result.stdout and "Traceback" not in result.stderr, result.stderr
