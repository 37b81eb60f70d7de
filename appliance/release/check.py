"""Release check: what git holds may be published.

Named checks over the blobs of a checkout's index and HEAD (read with git, never from the
working tree; with history, every reachable commit): no model weights or GGUF files, no raw
route traces, nothing over a size limit (but for the vendored third-party files listed by
path and sha256 in `appliance.core.vendored`, exactly those versions), no private network
addresses or home-directory paths, no credentials or tokens (binary files included), and
every evidence file valid against its schema. Each failure names the file, the line and the
commit that introduced it.
"""

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.core.checks import Check, Status
from appliance.core.digests import sha256_bytes
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.vendored import vendored_sha256
from appliance.evidence.finding import load_findings
from appliance.models.gguf_header import GGUF_MAGIC
from appliance.trace.format import MAGIC as TRACE_MAGIC
from appliance.trace.route_csv import MAGIC_LINE as ROUTE_CSV_MAGIC_LINE

DEFAULT_MAX_BYTES = 1 << 20
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".tflite")
WEIGHT_MAGICS = (GGUF_MAGIC,)
TRACE_SUFFIXES = (".moetrace",)
# Our format, and route_trace CSV (trace import) by its first line's prefix without the version.
TRACE_MAGICS = (TRACE_MAGIC, ROUTE_CSV_MAGIC_LINE.rsplit(" ", 1)[0].encode())
SHOWN = 8
SCAN_LIMIT = 64 << 20
ALLOW_FILE = ".release-check-allow"

_OCTET = r"(?:25[0-5]|2[0-4]\d|1?\d?\d)"
PRIVATE_ADDRESS = re.compile(
    r"(?<![\d.])(?:10(?:\." + _OCTET + r"){3}"
    r"|192\.168(?:\." + _OCTET + r"){2}"
    r"|172\.(?:1[6-9]|2\d|3[01])(?:\." + _OCTET + r"){2}"
    r"|169\.254(?:\." + _OCTET + r"){2}"
    r"|100\.(?:6[4-9]|[7-9]\d|1[01]\d|12[0-7])(?:\." + _OCTET + r"){2})(?![\d.]*\d)"
)
HOME_PATH = re.compile(r"(?<![\w.~$])(?:/home/|/Users/|[A-Za-z]:\\Users\\)[A-Za-z0-9._-]+")
CREDENTIALS = {
    "private key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"),
    "GitHub token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
    "AWS access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    "Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    "PyPI token": re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{40,}"),
    "API secret key": re.compile(r"\bsk-[A-Za-z0-9_-]{32,}"),
    "assigned secret": re.compile(
        r"(?i)\b(?:password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
        r"\s*[:=]\s*[\"'][^\"'\s]{12,}[\"']"
    ),
}


@dataclass(frozen=True)
class Blob:
    """One committed or staged file version: where it is, and the commit that introduced it."""

    path: str
    oid: str
    commit: str | None = None

    def origin(self) -> str:
        return f"introduced in {self.commit[:12]}" if self.commit else "staged, not committed"


def _git(root: Path, *args: str, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True, check=False)
    if result.returncode != 0:
        raise ApplianceError(
            f"{root}: git {args[0]} failed "
            f"({result.stderr.decode(errors='replace').strip()}): run the "
            "release check in a git checkout of the project"
        )
    return result.stdout


def _records(output: bytes) -> list[tuple[str, str]]:
    """(path, blob id) from `ls-files -s -z` or `ls-tree -r -z` output; submodules skipped."""
    found = []
    for record in output.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.decode("utf-8", errors="surrogateescape").partition("\t")
        fields = meta.split()
        if fields[0] == "160000":
            continue
        oid = fields[1] if len(fields) == 3 and fields[1] != "blob" else fields[2]
        found.append((path, oid))
    return found


def _has_head(root: Path) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, check=False
        ).returncode
        == 0
    )


def committed_blobs(root: Path, history: bool = False) -> list[Blob]:
    """The blobs in the index and HEAD (with history: in every reachable commit), each once.

    Working-tree edits are never read: what is committed or staged is what can be published.
    With history, each blob carries the first commit (oldest first) that has it at its path.
    """
    probe = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--git-dir"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        raise ApplianceError(
            f"{root}: not a git checkout ({probe.stderr.strip()}): run the "
            "release check from the project's repository"
        )
    first: dict[tuple[str, str], str | None] = {}
    if history:
        commits = _git(root, "rev-list", "--all", "--reverse", "--topo-order").decode().split()
        for commit in commits:
            for entry in _records(_git(root, "ls-tree", "-r", "-z", "--full-tree", commit)):
                first.setdefault(entry, commit)
    elif _has_head(root):
        for entry in _records(_git(root, "ls-tree", "-r", "-z", "--full-tree", "HEAD")):
            first.setdefault(entry, None)
    for entry in _records(_git(root, "ls-files", "-s", "-z")):
        first.setdefault(entry, None)
    return [Blob(path, oid, commit) for (path, oid), commit in sorted(first.items())]


def introducing_commit(root: Path, blob: Blob) -> Blob:
    """blob with the oldest reachable commit that added it at its path (None if only staged)."""
    if blob.commit is not None or not _has_head(root):
        return blob
    out = (
        _git(root, "log", "--all", "--reverse", "--format=%H", f"--find-object={blob.oid}", "--", blob.path)
        .decode()
        .split()
    )
    return Blob(blob.path, blob.oid, out[0] if out else None)


def read_blobs(root: Path, oids: list[str], limit: int) -> dict[str, tuple[int, bytes]]:
    """oid -> (size, content); blobs larger than limit carry only their first 16 bytes."""
    unique = sorted(set(oids))
    if not unique:
        return {}
    sizes: dict[str, int] = {}
    for line in (
        _git(root, "cat-file", "--batch-check", stdin="\n".join(unique).encode() + b"\n")
        .decode()
        .splitlines()
    ):
        oid, _, length = line.split()
        sizes[oid] = int(length)
    small = [oid for oid in unique if sizes[oid] <= limit]
    out = _git(root, "cat-file", "--batch", stdin="\n".join(small).encode() + b"\n")
    blobs: dict[str, tuple[int, bytes]] = {}
    position = 0
    for oid in small:
        header_end = out.index(b"\n", position)
        size = int(out[position:header_end].split()[2])
        blobs[oid] = (size, out[header_end + 1 : header_end + 1 + size])
        position = header_end + 1 + size + 1
    for oid in unique:
        if oid not in blobs:
            with subprocess.Popen(
                ["git", "-C", str(root), "cat-file", "blob", oid], stdout=subprocess.PIPE
            ) as proc:
                assert proc.stdout is not None
                head = proc.stdout.read(16)
                proc.kill()
            blobs[oid] = (sizes[oid], head)
    return blobs


def reviewed_blobs(root: Path) -> set[tuple[str, str]]:
    """(path, blob id) pairs listed in the staged ALLOW_FILE: file versions a person reviewed
    and found to hold only test fixtures. A changed file is a new blob and is scanned again."""
    listed = subprocess.run(
        ["git", "-C", str(root), "cat-file", "blob", f":{ALLOW_FILE}"], capture_output=True, check=False
    )
    if listed.returncode != 0:
        return set()
    allowed = set()
    for number, line in enumerate(listed.stdout.decode(errors="replace").splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2 or not re.fullmatch(r"[0-9a-f]{40}", fields[0]):
            raise ConfigError(f"{ALLOW_FILE}:{number}: expected `<blob id> <path>  # reason`")
        allowed.add((fields[1], fields[0]))
    return allowed


def _is_text(data: bytes) -> bool:
    return b"\0" not in data[:8192]


Hit = tuple[Blob, str]


def _result(root: Path, name: str, hits: list[Hit], ok: str, problem: str) -> Check:
    """PASS, or FAIL naming each hit (`path:line (what, introduced in COMMIT)`)."""
    if not hits:
        return Check(name, Status.PASS, ok)
    origins: dict[Blob, str] = {}
    shown = []
    for blob, text in hits[:SHOWN]:
        if blob not in origins:
            origins[blob] = introducing_commit(root, blob).origin()
        shown.append(f"{text}, {origins[blob]})")
    more = f"; and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
    return Check(
        name, Status.FAIL, f"{problem}: {'; '.join(shown)}{more}", sorted({blob.path for blob, _ in hits})
    )


def _scan_lines(texts: dict[Blob, str], match: Callable[[str], str | None]) -> list[Hit]:
    hits = []
    for blob, text in texts.items():
        for number, line in enumerate(text.splitlines(), 1):
            what = match(line)
            if what is not None:
                hits.append((blob, f"{blob.path}:{number} ({what}"))
    return hits


def _first(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    def match(line: str) -> str | None:
        found = pattern.search(line)
        return found.group(0) if found else None

    return match


def _credential(line: str) -> str | None:
    for name, pattern in CREDENTIALS.items():
        if pattern.search(line):
            return name
    return None


def _evidence_check(root: Path, paths: set[str]) -> Check:
    if not any(p.startswith("evidence/") and p.endswith(".json") for p in paths):
        return Check("evidence-valid", Status.PASS, "no evidence files tracked")
    try:
        findings = load_findings(root / "evidence")
    except ConfigError as exc:
        return Check("evidence-valid", Status.FAIL, str(exc).replace(f"{root}/", ""))
    return Check("evidence-valid", Status.PASS, f"{len(findings)} evidence files valid against their schema")


def release_check(root: Path, max_bytes: int = DEFAULT_MAX_BYTES, history: bool = False) -> list[Check]:
    """Every named release check over the blobs git holds for root: the index and HEAD, or
    with history every blob of every reachable commit. Binary blobs are scanned for
    credentials too; the other line checks read text blobs."""
    blobs = committed_blobs(root, history)
    contents = read_blobs(root, [b.oid for b in blobs], max(max_bytes, SCAN_LIMIT))
    reviewed = reviewed_blobs(root)
    vendored = vendored_sha256()
    weights: list[Hit] = []
    traces: list[Hit] = []
    large: list[Hit] = []
    texts: dict[Blob, str] = {}
    binaries: dict[Blob, str] = {}
    for blob in blobs:
        size, data = contents[blob.oid]
        lower = blob.path.lower()
        if lower.endswith(WEIGHT_SUFFIXES) or data.startswith(WEIGHT_MAGICS):
            weights.append((blob, f"{blob.path} (model weights"))
        listed = blob.path in vendored and len(data) == size and sha256_bytes(data) == vendored[blob.path]
        if (lower.endswith(TRACE_SUFFIXES) or data.startswith(TRACE_MAGICS)) and not listed:
            traces.append((blob, f"{blob.path} (route trace"))
        if size > max_bytes and not listed:
            large.append((blob, f"{blob.path} ({size} bytes"))
        if size > SCAN_LIMIT or (blob.path, blob.oid) in reviewed:
            continue
        if _is_text(data):
            texts[blob] = data.decode("utf-8", errors="replace")
        else:
            binaries[blob] = data.decode("latin-1")
    scope = "in any reachable commit" if history else "in the index or HEAD"
    skipped = sum((b.path, b.oid) in reviewed for b in blobs)
    note = f" ({skipped} reviewed file versions in {ALLOW_FILE} not read)" if skipped else ""
    return [
        _result(
            root,
            "no-model-weights",
            weights,
            f"no GGUF or other weight files {scope}",
            "model weights are committed",
        ),
        _result(root, "no-raw-traces", traces, f"no raw route traces {scope}", "raw traces are committed"),
        _result(
            root,
            "file-size",
            large,
            f"every file {scope} is at most {max_bytes} bytes",
            f"files over {max_bytes} bytes",
        ),
        _result(
            root,
            "no-private-addresses",
            _scan_lines(texts, _first(PRIVATE_ADDRESS)),
            f"no private network addresses{note}",
            "private network addresses",
        ),
        _result(
            root,
            "no-home-paths",
            _scan_lines(texts, _first(HOME_PATH)),
            f"no home-directory paths{note}",
            "home-directory paths",
        ),
        _result(
            root,
            "no-credentials",
            _scan_lines({**texts, **binaries}, _credential),
            f"no credentials or tokens {scope}, text or binary{note}",
            "credentials or tokens",
        ),
        _evidence_check(root, {b.path for b in blobs}),
    ]
