"""Find and download a pinned source distribution through the configured package index.

The index is the one pip is configured with (PIP_INDEX_URL, pip's config, else pip's own
default), so air-gapped labs with a mirror work unchanged. Only the PEP 503/691 "simple"
API is used: it lists each file with its sha256.
"""

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.strict_load import parse_json_bytes

TIMEOUT_S = 60


def index_url() -> str:
    """APPLIANCE_PACKAGE_INDEX, PIP_INDEX_URL, pip's configured index-url, else pip's default."""
    for var in ("APPLIANCE_PACKAGE_INDEX", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var].rstrip("/") + "/"
    try:
        configured = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if configured.returncode == 0 and configured.stdout.strip():
            return configured.stdout.strip().rstrip("/") + "/"
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        from pip._internal.models.index import PyPI  # pip's own default index
    except ImportError as exc:
        raise ApplianceError(
            "no package index configured: set APPLIANCE_PACKAGE_INDEX to a PEP 503 simple index"
        ) from exc
    return str(PyPI.simple_url).rstrip("/") + "/"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_sdist(package: str, version: str) -> tuple[str, str | None]:
    """(download URL, sha256 the index states or None) of `package==version`'s sdist."""
    page = urljoin(index_url(), _normalize(package) + "/")
    request = urllib.request.Request(
        page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read()
            content_type = response.headers.get("Content-Type", "")
    except (urllib.error.URLError, TimeoutError) as exc:
        raise ApplianceError(f"package index unreachable for {package} ({page}): {exc}") from None
    wanted = f"{package}-{version}.tar.gz".lower()
    if "json" in content_type:
        try:
            listing = parse_json_bytes(body, page)
        except ConfigError as exc:
            raise ApplianceError(f"package index answered {package} with unreadable JSON: {exc}") from None
        for item in listing.get("files", []):
            if item["filename"].lower() == wanted:
                return item["url"], item.get("hashes", {}).get("sha256")
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        for href in parser.links:
            url, fragment = urldefrag(urljoin(page, href))
            if url.rsplit("/", 1)[-1].lower() == wanted:
                digest = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
                return url, digest
    raise ApplianceError(f"{package}=={version}: no source distribution on the index ({page})")
