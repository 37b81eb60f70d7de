"""Release check: what git tracks may be published.

Named checks over the tracked files of a checkout: no model weights or GGUF files, no raw
route traces, nothing over a size limit, no private network addresses, home-directory paths,
credentials or tokens, and every evidence file valid against its schema. Each check passes or
fails with the offending files (and lines) named.
"""

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from appliance.attest.bundle import Check
from appliance.core.errors import ApplianceError, ConfigError
from appliance.evidence.findings import load_findings

DEFAULT_MAX_BYTES = 1 << 20
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".tflite")
WEIGHT_MAGICS = (b"GGUF",)
TRACE_SUFFIXES = (".moetrace",)
TRACE_MAGICS = (b"MOETRACE",)
SHOWN = 8

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
        r"\s*[:=]\s*[\"'][^\"'\s]{12,}[\"']"),
}


def tracked_files(root: Path) -> list[str]:
    """Paths git tracks in root (relative, sorted)."""
    result = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                            check=False)
    if result.returncode != 0:
        raise ApplianceError(f"{root}: not a git checkout ({result.stderr.decode().strip()}): "
                             "run the release check from the project's repository")
    return sorted(p for p in result.stdout.decode().split("\0") if p)


def _head(path: Path, size: int = 16) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _result(name: str, hits: list[str], ok: str, problem: str) -> Check:
    if not hits:
        return Check(name, "pass", ok)
    shown = "; ".join(hits[:SHOWN]) + (f"; and {len(hits) - SHOWN} more" if len(hits) > SHOWN
                                       else "")
    return Check(name, "fail", f"{problem}: {shown}",
                 sorted({h.split(":", 1)[0] for h in hits}))


def _scan_lines(texts: dict[str, str], match: Callable[[str], str | None]) -> list[str]:
    hits = []
    for rel, text in texts.items():
        for number, line in enumerate(text.splitlines(), 1):
            what = match(line)
            if what is not None:
                hits.append(f"{rel}:{number} ({what})")
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


def _evidence_check(root: Path, tracked: list[str]) -> Check:
    if not any(p.startswith("evidence/") and p.endswith(".json") for p in tracked):
        return Check("evidence-valid", "pass", "no evidence files tracked")
    try:
        findings = load_findings(root / "evidence")
    except ConfigError as exc:
        return Check("evidence-valid", "fail", str(exc).replace(f"{root}/", ""))
    return Check("evidence-valid", "pass", f"{len(findings)} evidence files valid against "
                 "their schema")


def release_check(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Check]:
    """Every named release check over the files git tracks in root."""
    tracked = [p for p in tracked_files(root) if (root / p).is_file()]
    weights, traces, large = [], [], []
    texts: dict[str, str] = {}
    for rel in tracked:
        path = root / rel
        head, lower = _head(path), rel.lower()
        if lower.endswith(WEIGHT_SUFFIXES) or head.startswith(WEIGHT_MAGICS):
            weights.append(rel)
        if lower.endswith(TRACE_SUFFIXES) or head.startswith(TRACE_MAGICS):
            traces.append(rel)
        size = path.stat().st_size
        if size > max_bytes:
            large.append(f"{rel} ({size} bytes)")
            continue
        text = _text(path)
        if text is not None:
            texts[rel] = text
    return [
        _result("no-model-weights", weights, "no GGUF or other weight files tracked",
                "model weights are tracked"),
        _result("no-raw-traces", traces, "no raw route traces tracked", "raw traces are tracked"),
        _result("file-size", large, f"every tracked file is at most {max_bytes} bytes",
                f"files over {max_bytes} bytes"),
        _result("no-private-addresses", _scan_lines(texts, _first(PRIVATE_ADDRESS)),
                "no private network addresses", "private network addresses"),
        _result("no-home-paths", _scan_lines(texts, _first(HOME_PATH)),
                "no home-directory paths", "home-directory paths"),
        _result("no-credentials", _scan_lines(texts, _credential),
                "no credentials or tokens", "credentials or tokens"),
        _evidence_check(root, tracked),
    ]
