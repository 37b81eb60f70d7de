import hashlib
import os
from pathlib import Path

import pytest

from appliance.core.errors import ApplianceError, IntegrityError
from appliance.runs import model_files
from appliance.runs.model_files import SKIPPED, UNPINNED, VERIFIED, check_model
from appliance.runs.profile import ModelManifest

DATA = os.urandom(3 << 20)
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))


def _models(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(DATA)
    return models


def _manifest(size: int | None = len(DATA), sha256: str | None = DIGEST) -> ModelManifest:
    return ModelManifest("m.gguf", size, sha256, "the test writes it", None)


def _snapshot(directory: Path) -> list[tuple[str, int, int, str]]:
    return sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in directory.iterdir()
    )


def test_a_pinned_file_verifies_and_the_second_check_hashes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = _models(tmp_path)
    before = _snapshot(models)
    first = check_model(_manifest(), models)
    assert (first.digest_status, first.sha256, first.digest_from_cache) == (VERIFIED, DIGEST, False)
    hashed: list[Path] = []
    monkeypatch.setattr(
        model_files, "sha256_file", lambda path, progress=None: hashed.append(path) or "0" * 64
    )
    second = check_model(_manifest(), models)
    assert (second.sha256, second.digest_from_cache, hashed) == (DIGEST, True, [])
    assert _snapshot(models) == before  # the models directory is never written to
    assert not any(p.name != "m.gguf" for p in models.iterdir())


def test_a_changed_mtime_invalidates_the_cached_digest(tmp_path: Path) -> None:
    models = _models(tmp_path)
    check_model(_manifest(), models)
    os.utime(models / "m.gguf", ns=(1, 1))
    again = check_model(_manifest(), models)
    assert again.digest_from_cache is False and again.sha256 == DIGEST


def test_a_wrong_digest_refuses_with_exit_3(tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="f" * 64) as info:
        check_model(_manifest(sha256="f" * 64), _models(tmp_path))
    assert info.value.exit_code == 3
    assert DIGEST in str(info.value) and "f" * 64 in str(info.value)


def test_a_wrong_size_refuses_before_hashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_files, "sha256_file", lambda *a, **k: pytest.fail("hashed"))
    with pytest.raises(IntegrityError, match=f"has {len(DATA):,} bytes, the profile pins 5"):
        check_model(_manifest(size=5), _models(tmp_path))


def test_a_missing_model_names_file_size_digest_and_source(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ApplianceError, match="m.gguf not found") as info:
        check_model(_manifest(), tmp_path / "empty")
    message = str(info.value)
    assert "m.gguf not found" in message and f"{len(DATA):,} bytes" in message
    assert DIGEST in message and "the test writes it" in message


def test_unpinned_records_the_digest_and_skip_hashes_nothing(tmp_path: Path) -> None:
    models = _models(tmp_path)
    unpinned = check_model(_manifest(size=None, sha256=None), models)
    assert (unpinned.digest_status, unpinned.sha256) == (UNPINNED, DIGEST)
    skipped = check_model(_manifest(sha256="f" * 64), models, skip_digest=True)
    assert (skipped.digest_status, skipped.sha256) == (SKIPPED, None)
    assert "path" not in skipped.manifest()  # no host paths into the bundle


def test_a_missing_synthesized_model_says_how_to_make_it(tmp_path: Path) -> None:
    manifest = ModelManifest(
        "tiny.gguf", None, None, "synthesized", {"arch": "qwen3moe", "size": "400MiB", "seed": 1}
    )
    with pytest.raises(ApplianceError, match="create it with: appliance model synth") as info:
        check_model(manifest, tmp_path)
    assert str(info.value).endswith(
        f"create it with: appliance model synth {tmp_path}/tiny.gguf --arch qwen3moe --size 400MiB --seed 1"
    )


def test_hashing_reports_its_bytes_through_the_callback(tmp_path: Path) -> None:
    from appliance.core.progress import BYTES, Progress

    models = _models(tmp_path)
    seen: list[Progress] = []
    check_model(_manifest(), models, progress=seen.append)
    size = (models / "m.gguf").stat().st_size
    assert seen and seen[-1] == Progress("sha256 m.gguf", size, size, BYTES)
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    again: list[Progress] = []
    check_model(_manifest(), models, progress=again.append)
    assert again == []  # from the digest cache: nothing hashed, nothing reported
