"""Key pairs, a genuine signed bundle, and a trust store holding only the sealing key,
for the attest tests."""

from pathlib import Path

import pytest

from appliance.attest.bundle import finalize_bundle
from appliance.attest.dsse import init_keys
from appliance.attest.trust import trust_key
from tests.fake_run import make_run
from tests.tamper import Keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("keys")
    return Keys(trusted=init_keys(root / "trusted"), untrusted=init_keys(root / "untrusted"))


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    """A fake run sealed with keys.trusted (one per test module)."""
    run = make_run(tmp_path_factory.mktemp("genuine"))
    finalize_bundle(run, keys.trusted.private)
    return run


@pytest.fixture
def trust_store(tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> Path:
    """APPLIANCE_TRUSTED_KEYS pointed at a fresh store that trusts keys.trusted only."""
    store = tmp_path / "trusted-keys"
    monkeypatch.setenv("APPLIANCE_TRUSTED_KEYS", str(store))
    trust_key(keys.trusted.public)
    return store
