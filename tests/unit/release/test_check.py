"""Release check: passes on this repository, fails on a tree with weights, home paths, tokens."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from appliance.core.checks import Check, Status
from appliance.release.check import release_check
from tests.conftest import REPO, run_cli

# Assembled at run time so that this file itself stays publishable.
FAKE_GITHUB_TOKEN = "gh" + "p_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
HOME_PATH = "/" + "home/alice/models/qwen.gguf"
PRIVATE_ADDRESS = ".".join(["192", "168", "1", "20"])


def git_tree(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    subprocess.run(["git", "-C", str(root), "add", "-f", "."], check=True)
    return root


def commit(root: Path, message: str) -> str:
    subprocess.run(["git", "-C", str(root), "add", "-A", "-f", "."], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message],
        check=True,
    )
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_repository_passes() -> None:
    checks = release_check(REPO)
    assert [c.name for c in checks if c.status is not Status.PASS] == []
    count = len(list((REPO / "evidence").glob("*.json")))
    assert by_name(checks)["evidence-valid"].reason.startswith(f"{count} evidence files valid")


def test_cli_passes_on_repository_history() -> None:
    result = run_cli("release-check", "--history", "--json", check=True)
    report = json.loads(result.stdout)
    assert report["verdict"] == Status.PASS.value
    assert {c["name"]: Status(c["status"]) for c in report["checks"]} == {
        name: Status.PASS
        for name in (
            "no-model-weights",
            "no-raw-traces",
            "file-size",
            "no-private-addresses",
            "no-home-paths",
            "no-credentials",
            "evidence-valid",
        )
    }
    assert "in any reachable commit" in report["checks"][0]["reason"]


def test_committed_credential_edited_away_in_the_working_tree_fails(tmp_path: Path) -> None:
    tree = git_tree(tmp_path / "tree", {"config/ci.env": f"T={FAKE_GITHUB_TOKEN}\n".encode()})
    introduced = commit(tree, "add config")
    (tree / "config" / "ci.env").write_text("T=read-from-the-environment\n")
    check = by_name(release_check(tree))["no-credentials"]
    assert check.status is Status.FAIL
    assert check.reason == (
        f"credentials or tokens: config/ci.env:1 (GitHub token, introduced in {introduced[:12]})"
    )
    (tree / "config" / "ci.env").unlink()
    assert by_name(release_check(tree))["no-credentials"].status is Status.FAIL


def test_history_finds_a_credential_committed_then_deleted(tmp_path: Path) -> None:
    tree = git_tree(
        tmp_path / "tree", {"README.md": b"clean\n", "leak.txt": f"{FAKE_GITHUB_TOKEN}\n".encode()}
    )
    introduced = commit(tree, "oops")
    (tree / "leak.txt").unlink()
    commit(tree, "remove the leak")
    assert by_name(release_check(tree))["no-credentials"].status is Status.PASS
    check = by_name(release_check(tree, history=True))["no-credentials"]
    assert check.reason == (
        f"credentials or tokens: leak.txt:1 (GitHub token, introduced in {introduced[:12]})"
    )
    result = run_cli("release-check", "--root", str(tree), "--history")
    assert result.returncode == 1 and "no-credentials" in result.stderr


def test_binary_files_are_scanned_for_credentials(tmp_path: Path) -> None:
    blob = bytes(100) + f"aws=AKIA{'ABCDEFGHIJKLMNOP'}".encode() + bytes(100)
    tree = git_tree(tmp_path / "tree", {"data/blob.bin": blob})
    assert by_name(release_check(tree))["no-credentials"].reason == (
        "credentials or tokens: data/blob.bin:1 (AWS access key, staged, not committed)"
    )


def test_reviewed_file_versions_are_listed_by_blob_id(tmp_path: Path) -> None:
    leak = f"{FAKE_GITHUB_TOKEN}\n".encode()
    tree = git_tree(tmp_path / "tree", {"fixture.txt": leak})
    oid = subprocess.run(
        ["git", "-C", str(tree), "hash-object", "fixture.txt"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (tree / ".release-check-allow").write_text(f"{oid} fixture.txt  # a test fixture\n")
    subprocess.run(["git", "-C", str(tree), "add", ".release-check-allow"], check=True)
    assert by_name(release_check(tree))["no-credentials"].status is Status.PASS
    (tree / "fixture.txt").write_bytes(leak + b"more\n")
    subprocess.run(["git", "-C", str(tree), "add", "fixture.txt"], check=True)
    assert by_name(release_check(tree))["no-credentials"].status is Status.FAIL


def test_tree_with_gguf_home_path_and_token_fails(tmp_path: Path) -> None:
    tree = git_tree(
        tmp_path / "tree",
        {
            "README.md": b"clean\n",
            "models/tiny.gguf": b"GGUF\x03\x00\x00\x00" + bytes(64),
            "docs/setup.md": f"Put the model at {HOME_PATH} first.\n".encode(),
            "config/ci.env": f"GITHUB_TOKEN={FAKE_GITHUB_TOKEN}\n".encode(),
        },
    )
    result = run_cli("release-check", "--root", str(tree), "--json")
    assert result.returncode == 1
    assert "release check failed: no-model-weights, no-home-paths, no-credentials" in result.stderr
    report = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert report["no-model-weights"]["files"] == ["models/tiny.gguf"]
    assert report["no-home-paths"]["reason"] == (
        f"home-directory paths: docs/setup.md:1 ({HOME_PATH[:11]}, staged, not committed)"
    )
    assert report["no-credentials"]["reason"] == (
        "credentials or tokens: config/ci.env:1 (GitHub token, staged, not committed)"
    )
    assert Status(report["no-raw-traces"]["status"]) is Status.PASS


def test_gguf_found_by_magic_under_another_name(tmp_path: Path) -> None:
    tree = git_tree(tmp_path / "tree", {"data/blob.dat": b"GGUF\x03\x00\x00\x00" + bytes(32)})
    assert by_name(release_check(tree))["no-model-weights"].files == ["data/blob.dat"]


def test_traces_size_and_private_addresses(tmp_path: Path) -> None:
    tree = git_tree(
        tmp_path / "tree",
        {
            "runs/a.moetrace": b"MOETRACE" + bytes(16),
            "big.txt": b"x" * 2048,
            "notes.md": f"registry at {PRIVATE_ADDRESS}:5000, loopback 127.0.0.1 is fine, "
            "version 10.0.1 is not an address\n".encode(),
        },
    )
    checks = by_name(release_check(tree, max_bytes=1024))
    assert checks["no-raw-traces"].files == ["runs/a.moetrace"]
    assert checks["file-size"].reason == (
        "files over 1024 bytes: big.txt (2048 bytes, staged, not committed)"
    )
    assert checks["no-private-addresses"].reason == (
        f"private network addresses: notes.md:1 ({PRIVATE_ADDRESS}, staged, not committed)"
    )


def test_route_trace_csvs_are_raw_traces_but_the_vendored_versions(tmp_path: Path) -> None:
    """A route_trace CSV is a raw trace wherever it lies; the vendored fixtures pass the trace
    and size rules only byte for byte (path and sha256 in appliance/core/vendored.py)."""
    from appliance.core.vendored import VENDORED

    vendored = VENDORED[0]  # the Qwen3 trace: over 1 MiB
    data = (REPO / vendored.path).read_bytes()
    assert len(data) > 1 << 20
    tree = git_tree(
        tmp_path / "tree",
        {
            vendored.path: data,
            "runs/copy.route.csv": data[:4096],
            VENDORED[1].path: (REPO / VENDORED[1].path).read_bytes() + b"0,1,200,0,0,1,0.5,0,0\n",
        },
    )
    checks = by_name(release_check(tree))
    assert checks["no-raw-traces"].files == sorted(["runs/copy.route.csv", VENDORED[1].path])
    assert checks["file-size"].status is Status.PASS
    moved = git_tree(tmp_path / "moved", {"elsewhere/qwen.route.csv": data})
    checks = by_name(release_check(moved))
    assert checks["no-raw-traces"].files == ["elsewhere/qwen.route.csv"]
    assert checks["file-size"].files == ["elsewhere/qwen.route.csv"]


@pytest.mark.parametrize(
    "line, kind",
    [
        ("-----BEGIN " + "PRIVATE KEY-----", "private key"),
        ("key = AKIA" + "ABCDEFGHIJKLMNOP", "AWS access key"),
        ("HF=hf_" + "a" * 34, "Hugging Face token"),
        ('password: "' + "correct-horse-battery" + '"', "assigned secret"),
    ],
)
def test_credential_kinds(tmp_path: Path, line: str, kind: str) -> None:
    tree = git_tree(tmp_path / "tree", {"leak.txt": (line + "\n").encode()})
    assert by_name(release_check(tree))["no-credentials"].reason == (
        f"credentials or tokens: leak.txt:1 ({kind}, staged, not committed)"
    )


def test_invalid_evidence_fails(tmp_path: Path) -> None:
    files = {"evidence/broken.json": json.dumps({"schema_version": 1, "id": "broken"}).encode()}
    tree = git_tree(tmp_path / "tree", files)
    check = by_name(release_check(tree))["evidence-valid"]
    assert check.status is Status.FAIL
    assert check.reason.startswith("evidence/broken.json: /title: missing field (and 10 more)")


def test_not_a_git_checkout(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path, ignore_errors=True)
    tmp_path.mkdir()
    result = run_cli("release-check", "--root", str(tmp_path))
    assert result.returncode == 1 and "not a git checkout" in result.stderr
