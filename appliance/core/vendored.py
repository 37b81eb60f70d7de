"""Third-party data the repository carries on purpose: the one list of vendored files.

Each entry names the file by path and sha256, where it comes from and under which licence.
`appliance release-check` accepts exactly these file versions where its size and raw-trace
rules would refuse them (a changed byte is a new file and is refused again), the notices
generator lists them in THIRD_PARTY_NOTICES.md, and a test checks the files against it.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class VendoredFile:
    path: str  # in the repository
    sha256: str
    source: str  # repository and path it was copied from
    commit: str
    licence: str  # SPDX identifier
    licence_file: str  # in the repository, next to the file
    reason: str  # why the repository holds it


REAL_ROUTES = "tests/fixtures/real-routes"
_BIGMOE = "Helldez/BigMoeOnEdge"
_BIGMOE_COMMIT = "2d4f2b11db128cbe32da738ce114c0479542f458"
_BIGMOE_DIR = "docs/bench-data/2026-07-15-route-trace"
_ROUTES_REASON = (
    "routes of real MoE models (route_trace v1 CSV) that the import and locality tests read; "
    "the preamble names the recording host's model path, which the import never stores"
)

VENDORED: tuple[VendoredFile, ...] = tuple(
    VendoredFile(
        path=f"{REAL_ROUTES}/{name}",
        sha256=sha256,
        source=f"{_BIGMOE}:{_BIGMOE_DIR}/{upstream}",
        commit=_BIGMOE_COMMIT,
        licence="Apache-2.0",
        licence_file=f"{REAL_ROUTES}/LICENSE-BigMoeOnEdge.txt",
        reason=_ROUTES_REASON,
    )
    for name, upstream, sha256 in (
        (
            "qwen3-30b-a3b-q4_k_m.route.csv",
            "qwen.route.csv",
            "38257865c1447b5659b19696392f63df3bfcc1763b8050cb5a463b0aa999ead9",
        ),
        (
            "gemma-4-26b-a4b-q4_k_m.route.csv",
            "gemma.route.csv",
            "0f20f2e604d72084ca3bb1ad99540d5d70d2ee66f7003d55f5d51582b8a0af20",
        ),
        (
            "gpt-oss-120b-q4_k_m.route.csv",
            "gptoss.route.csv",
            "e5446f184d0f5327506637f0ca8c4a5a053373ed45cddf73c2199f20ce706e5e",
        ),
    )
)


def vendored_sha256() -> dict[str, str]:
    """path -> sha256 of every vendored file version."""
    return {entry.path: entry.sha256 for entry in VENDORED}
