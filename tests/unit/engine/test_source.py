import functools
import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from appliance.core.digests import tree_digest
from appliance.core.errors import ApplianceError, IntegrityError
from appliance.core.paths import default_lock_path
from appliance.engine.lock import load_lock, parse_lock
from appliance.engine.source import fetch_source
from tests.conftest import lock_with, run_cli


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("APPLIANCE_CACHE", str(cache))
    return cache


@pytest.mark.network
def test_both_stand_ins_fetch_verify_and_refetch_nothing(fresh_cache: Path) -> None:
    lock = load_lock()
    for name in ("b10068", "b10229"):
        first = fetch_source(lock, name)
        ident = first.identity
        assert first.downloaded_bytes > 30_000_000
        assert ident["kind"] == "stand-in" and ident["name"] == name and ident["verified"] is True
        assert ident["canonical"] is False
        assert ident["sdist_sha256"] == lock.stand_ins[name].sdist_sha256
        assert ident["upstream_release"] == name
        assert ident["tree_digest"] == tree_digest(first.path)
        assert (first.path / "src" / "llama-mmap.cpp").is_file()
        assert not (first.path / ".git").exists()
        archives = {p: p.stat().st_mtime_ns for p in (fresh_cache / "downloads").iterdir()}

        second = fetch_source(lock, name)
        assert second.downloaded_bytes == 0
        assert second.identity == ident
        assert {p: p.stat().st_mtime_ns for p in (fresh_cache / "downloads").iterdir()} == archives
    # the file the demand-mmap patch touches is byte-identical across the bracket
    a = fetch_source(lock, "b10068").path / "src" / "llama-mmap.cpp"
    b = fetch_source(lock, "b10229").path / "src" / "llama-mmap.cpp"
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.network
def test_edited_cache_file_is_detected_and_repaired(fresh_cache: Path) -> None:
    lock = load_lock()
    tree = fetch_source(lock, "b10229").path
    victim = tree / "src" / "llama-mmap.cpp"
    original = victim.read_bytes()
    victim.write_bytes(original + b"// tampered\n")

    again = fetch_source(lock, "b10229")
    assert again.repaired is True
    assert "does not match its identity record" in again.notes[0]
    assert again.downloaded_bytes == 0  # repaired from the verified archive
    assert (again.path / "src" / "llama-mmap.cpp").read_bytes() == original


@pytest.mark.network
def test_truncated_archive_is_detected_and_downloaded_again(fresh_cache: Path) -> None:
    lock = load_lock()
    tree = fetch_source(lock, "b10229").path
    archive = next((fresh_cache / "downloads").iterdir())
    archive.write_bytes(archive.read_bytes()[:1000])
    (tree / "CMakeLists.txt").unlink()  # force a re-extract, which needs the archive

    again = fetch_source(lock, "b10229")
    assert again.repaired is True
    assert again.downloaded_bytes > 30_000_000
    assert (again.path / "CMakeLists.txt").is_file()


def test_sdist_not_matching_the_pin_is_refused_and_nothing_extracted(
    fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local PEP 503 index serves a file under the stand-in's name with other bytes."""
    root = tmp_path / "index"
    (root / "xllamacpp").mkdir(parents=True)
    (root / "xllamacpp" / "xllamacpp-2026.8.10229.tar.gz").write_bytes(b"not the pinned archive")
    (root / "xllamacpp" / "index.html").write_text('<a href="xllamacpp-2026.8.10229.tar.gz">x</a>')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("APPLIANCE_PACKAGE_INDEX", f"http://127.0.0.1:{server.server_port}/")
        with pytest.raises(IntegrityError, match="the lock pins d2924b89"):
            fetch_source(load_lock(), "b10229")
    finally:
        server.shutdown()
    sources = fresh_cache / "sources"
    assert not sources.exists() or not any(sources.iterdir())
    downloads = fresh_cache / "downloads"
    assert not downloads.exists() or not any(downloads.iterdir())


def _bare_repo(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "src").mkdir()
    (work / "CMakeLists.txt").write_text("project(fake)\n")
    (work / "src" / "llama.cpp").write_text("int main() {}\n")
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=work, check=True, text=True, capture_output=True
    ).stdout.strip()
    (work / "src" / "llama.cpp").write_text("int main() { return 1; }\n")
    subprocess.run(["git", "commit", "-qam", "two"], cwd=work, check=True, env=env)
    bare = tmp_path / "upstream.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare, commit


def test_canonical_path_clones_the_pin_from_a_local_bare_repository(
    fresh_cache: Path, tmp_path: Path
) -> None:
    bare, commit = _bare_repo(tmp_path)
    path = lock_with(tmp_path, lambda r: r["upstream"].update(repository=f"file://{bare}", commit=commit))
    lock = load_lock(path)
    tree = fetch_source(lock, "canonical")
    assert tree.identity["kind"] == "canonical" and tree.identity["upstream_commit"] == commit
    assert (tree.path / "src" / "llama.cpp").read_text() == "int main() {}\n"  # the pinned, not the newest
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree.path, text=True, capture_output=True)
    assert head.stdout.strip() == commit
    assert fetch_source(lock, "canonical").identity == tree.identity


def test_canonical_path_refuses_a_commit_the_repository_does_not_have(
    fresh_cache: Path, tmp_path: Path
) -> None:
    bare, _ = _bare_repo(tmp_path)
    wrong = "0123456789abcdef0123456789abcdef01234567"
    path = lock_with(tmp_path, lambda r: r["upstream"].update(repository=f"file://{bare}", commit=wrong))
    with pytest.raises(IntegrityError, match=f"pinned commit {wrong} is not in"):
        fetch_source(load_lock(path), "canonical")
    assert not (fresh_cache / "sources" / f"canonical-{wrong}" / "tree").exists()


def test_unreachable_canonical_fails_fast_and_names_the_stand_ins(fresh_cache: Path, tmp_path: Path) -> None:
    path = lock_with(tmp_path, lambda r: r["upstream"].update(repository=f"file://{tmp_path}/missing.git"))
    result = run_cli("engine", "fetch", "--source", "canonical", "--lock", str(path))
    assert result.returncode == 1
    assert "unreachable" in result.stderr and "--source b10229" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_local_directory_is_accepted_but_flagged_unverified(tmp_path: Path) -> None:
    tree = tmp_path / "llama.cpp"
    (tree / "src").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("project(x)\n")
    source = fetch_source(load_lock(), str(tree))
    assert source.identity["kind"] == "local" and source.identity["verified"] is False
    assert source.identity["tree_digest"] == tree_digest(tree)
    with pytest.raises(ApplianceError, match="does not look like a llama.cpp tree"):
        fetch_source(load_lock(), str(tmp_path))


def test_unknown_source_name_is_a_clear_error() -> None:
    lock = parse_lock(json.loads(default_lock_path().read_text()), default_lock_path())
    with pytest.raises(ApplianceError, match="unknown source 'b9999': use one of canonical, b10068, b10229"):
        fetch_source(lock, "b9999")


def _sdist(path: Path, top: str, trees: dict[str, str]) -> bytes:
    """A .tar.gz with `top/<subtree>/CMakeLists.txt` holding the given text per subtree."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for subtree, text in trees.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{subtree}/CMakeLists.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_editing_a_stand_ins_tree_version_or_package_never_returns_the_old_tree(
    fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same verified archive is served under two versions and two package names."""
    import hashlib

    root = tmp_path / "index"
    names = {"fakepkg": ("fakepkg-1.0.tar.gz", "fakepkg-1.1.tar.gz"), "otherpkg": ("otherpkg-1.0.tar.gz",)}
    data = _sdist(tmp_path / "sdist.tar.gz", "top", {"a": "project(a)\n", "b": "project(b)\n"})
    for package, files in names.items():
        (root / package).mkdir(parents=True)
        for name in files:
            (root / package / name).write_bytes(data)
        (root / package / "index.html").write_text("".join(f'<a href="{n}">{n}</a>' for n in files))
    sha = hashlib.sha256(data).hexdigest()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("APPLIANCE_PACKAGE_INDEX", f"http://127.0.0.1:{server.server_port}/")

    def lock(**changes: str):  # type: ignore[no-untyped-def]
        entry = {
            "package": "fakepkg",
            "version": "1.0",
            "release": "b1",
            "relation": "after-pin",
            "sdist_sha256": sha,
            "tree": "a",
            **changes,
        }
        return load_lock(lock_with(tmp_path, lambda r: r["stand_ins"].update(fake=entry)))

    try:
        first = fetch_source(lock(), "fake")
        assert (first.path / "CMakeLists.txt").read_text() == "project(a)\n"
        moved = fetch_source(lock(tree="b"), "fake")
        assert (moved.path / "CMakeLists.txt").read_text() == "project(b)\n"
        assert moved.identity["subtree"] == "b" and moved.path != first.path
        newer = fetch_source(lock(version="1.1"), "fake")
        assert newer.identity["version"] == "1.1" and newer.path not in (first.path, moved.path)
        assert newer.downloaded_bytes == len(data)  # fetched under its own name, not reused
        other = fetch_source(lock(package="otherpkg"), "fake")
        assert other.identity["package"] == "otherpkg"
        assert other.path not in (first.path, moved.path, newer.path)
        again = fetch_source(lock(), "fake")
        assert again.path == first.path and again.downloaded_bytes == 0
        assert (again.path / "CMakeLists.txt").read_text() == "project(a)\n"
    finally:
        server.shutdown()
