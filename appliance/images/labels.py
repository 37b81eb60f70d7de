"""The labels an engine image carries, what the lock says they should be, and drift between them.

Every label key the appliance writes or reads is a constant here. OCI annotations
(`org.opencontainers.image.*`) say where the image came from; the project's own labels, all
under the one namespace `io.moe-appliance.`, pin the engine inputs: lock digest, source
identity, series digest, target, CUDA architectures and the base images. Trial containers carry
`io.moe-appliance.run` and `io.moe-appliance.run.trial`. `inspect` compares an image's labels
with what the lock and patch series say now.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.core.digests import canonical_json, sha256_bytes
from appliance.core.errors import ConfigError
from appliance.core.strict_load import parse_json
from appliance.engine.lock import Lock, Target
from appliance.engine.patches import series_digest
from appliance.engine.tools import IMAGE_TOOLS

OCI = "org.opencontainers.image"
OWN = "io.moe-appliance"
IMAGE_REPOSITORY = "moe-expert-cache"

LOCK_DIGEST = f"{OWN}.lock-digest"
UPSTREAM_COMMIT = f"{OWN}.upstream-commit"
SOURCE_KIND = f"{OWN}.source-kind"
SOURCE_NAME = f"{OWN}.source-name"
SOURCE_IDENTITY = f"{OWN}.source-identity"
SERIES_DIGEST = f"{OWN}.series-digest"
EXPERIMENTAL = f"{OWN}.experimental-patches"
TARGET = f"{OWN}.target"
CUDA_ARCHITECTURES = f"{OWN}.cuda-architectures"
CUDA_VERSION = f"{OWN}.cuda-version"
CUDA_SASS = f"{OWN}.cuda-sass"
CUDA_PTX = f"{OWN}.cuda-ptx"
CUDA_WHEELS = f"{OWN}.cuda-wheels"
BASE_KIND = f"{OWN}.base-kind"
MIN_DRIVER = f"{OWN}.min-driver"
BUILD_BASE = f"{OWN}.build-base"
RUNTIME_BASE = f"{OWN}.runtime-base"
INPUTS_DIGEST = f"{OWN}.inputs-digest"
# the device backends built beside the target's own ("rpc": ggml-rpc-server, the stand-in GPU)
DEVICE_BACKENDS = f"{OWN}.device-backends"
RPC_CMAKE_FLAG = "-DGGML_RPC=ON"
# on trial containers, not images
RUN = f"{OWN}.run"
RUN_TRIAL = f"{OWN}.run.trial"


def recorded_labels(labels: dict[str, str]) -> dict[str, str]:
    """The OCI and appliance labels of an image, sorted by key (others are the base's business)."""
    return {k: v for k, v in sorted(labels.items()) if k.startswith((f"{OCI}.", f"{OWN}."))}


# Identity fields that say what the tree is; fetch times and notes are left out on purpose.
STABLE_IDENTITY_FIELDS = (
    "kind",
    "name",
    "package",
    "version",
    "sdist_sha256",
    "upstream_commit",
    "upstream_release",
    "repository",
    "subtree",
    "tree_digest",
    "canonical",
)


def stable_identity(identity: dict[str, Any]) -> dict[str, Any]:
    return {key: identity[key] for key in STABLE_IDENTITY_FIELDS if key in identity}


def image_tag(
    lock: Lock,
    target: str,
    identity: dict[str, Any],
    experimental: Sequence[str] = (),
    series: str = "",
    cuda_version: str = "",
) -> str:
    """`moe-expert-cache:<target>-<lockdigest12>`, plus the source when it is not canonical and
    the CUDA version when it is not the target's own."""
    tag = f"{IMAGE_REPOSITORY}:{target}-{lock.digest[:12]}"
    kind = identity.get("kind")
    if kind == "stand-in":
        tag += f"-standin-{identity.get('name')}"
    elif kind != "canonical":
        tag += f"-local-{str(identity.get('tree_digest', ''))[:12]}"
    if experimental:
        tag += f"-exp-{series[:8]}"
    if cuda_version:
        tag += f"-cuda{cuda_version}"
    return tag


def candidate_images(
    lock: Lock, target: str, experimental: Sequence[str] = ()
) -> list[tuple[str, str | None]]:
    """(tag, stand-in name; None for the canonical source) of each local engine image for
    `target` of this lock (with the `experimental` patches on top of the active series):
    canonical first, then each stand-in (newest release name first). Runners look for an
    image in this order and carry the stand-in with the tag they found."""
    series = series_digest(lock, experimental) if experimental else ""
    canonical = image_tag(lock, target, {"kind": "canonical"}, experimental, series)
    return [(canonical, None)] + [
        (image_tag(lock, target, {"kind": "stand-in", "name": name}, experimental, series), name)
        for name in sorted(lock.bracket_stand_ins, reverse=True)
    ]


def experimental_of_labels(labels: dict[str, str]) -> list[str]:
    """The experimental patches an image's labels say it carries, in their order."""
    return [name for name in labels.get(EXPERIMENTAL, "").split(",") if name]


def missing_experimental(labels: dict[str, str], experimental: Sequence[str]) -> list[str]:
    """The patches of `experimental` an image's labels do not list."""
    carried = set(experimental_of_labels(labels))
    return [name for name in experimental if name not in carried]


def candidate_tags(lock: Lock, target: str) -> list[str]:
    """The tags of `candidate_images`, in the same order."""
    return [tag for tag, _ in candidate_images(lock, target)]


def stand_in_of_labels(labels: dict[str, str]) -> str | None:
    """The stand-in an image's labels say it was built from; None for the canonical source."""
    return labels.get(SOURCE_NAME) if labels.get(SOURCE_KIND) == "stand-in" else None


def source_revision(lock: Lock, identity: dict[str, Any]) -> str:
    """The upstream commit for the canonical pin; for a stand-in its release (it has no commit)."""
    if identity.get("kind") == "canonical":
        return str(identity.get("upstream_commit", lock.upstream.commit))
    return str(identity.get("upstream_release") or identity.get("tree_digest", "unknown"))


@dataclass(frozen=True)
class BuildInputs:
    """Everything that decides an image's content; its digest decides whether to rebuild."""

    lock_digest: str
    target: Target
    identity: dict[str, Any]
    series_digest: str
    experimental: tuple[str, ...]
    dockerfile_sha256: str
    build_base_id: str
    runtime_base_id: str
    build_args: dict[str, str]

    def digest(self) -> str:
        return sha256_bytes(
            canonical_json(
                {
                    "lock_digest": self.lock_digest,
                    "target": self.target.name,
                    "source": stable_identity(self.identity),
                    "series_digest": self.series_digest,
                    "experimental": list(self.experimental),
                    "dockerfile_sha256": self.dockerfile_sha256,
                    "build_base_id": self.build_base_id,
                    "runtime_base_id": self.runtime_base_id,
                    "build_args": self.build_args,
                }
            )
        )


def base_kind(target: Target) -> str:
    """Where the image's bases came from: `debian` (mmdebstrap, cpu), or the CUDA toolkit's kind
    (`pypi-wheels`: registry-free, made from pinned wheels; `nvidia-cuda`: nvidia/cuda images)."""
    return target.cuda.base_kind if target.cuda else "debian"


def cuda_labels(lock: Lock, target: Target) -> dict[str, str]:
    """CUDA version, SASS and PTX architectures, driver floor and every wheel's sha256 ("" for cpu)."""
    cuda = target.cuda
    wheels = lock.cuda_toolkit(cuda.version).wheels if cuda else ()
    return {
        CUDA_ARCHITECTURES: cuda.architectures if cuda else "",
        CUDA_SASS: ",".join(cuda.sass) if cuda else "",
        CUDA_PTX: ",".join(cuda.ptx) if cuda else "",
        CUDA_VERSION: cuda.version if cuda else "",
        MIN_DRIVER: cuda.min_driver if cuda else "",
        CUDA_WHEELS: canonical_json({w.file: w.sha256 for w in wheels}).decode() if wheels else "",
        BASE_KIND: base_kind(target),
    }


def cuda_summary(labels: dict[str, str]) -> str:
    """One line naming a GPU image's CUDA build, from its labels ("" for a cpu image)."""
    version = labels.get(CUDA_VERSION)
    if not version:
        return ""
    return (
        f"CUDA {version} on {labels.get(BASE_KIND)} bases, SASS {labels.get(CUDA_SASS)} + PTX "
        f"{labels.get(CUDA_PTX)}, needs NVIDIA driver {labels.get(MIN_DRIVER)} or newer"
    )


def expected_labels(lock: Lock, inputs: BuildInputs, created: str) -> dict[str, str]:
    """The full label set for a build of `inputs`, `created` being an RFC 3339 time."""
    target, identity = inputs.target, inputs.identity
    labels = {
        f"{OCI}.source": lock.upstream.repository,
        f"{OCI}.revision": source_revision(lock, identity),
        f"{OCI}.created": created,
        f"{OCI}.version": str(identity.get("upstream_release", "local")),
        f"{OCI}.title": f"llama.cpp engine ({target.name})",
        f"{OCI}.description": f"pinned, patched llama.cpp: {', '.join(IMAGE_TOOLS)}",
        LOCK_DIGEST: inputs.lock_digest,
        UPSTREAM_COMMIT: lock.upstream.commit,
        SOURCE_KIND: str(identity.get("kind")),
        SOURCE_NAME: str(identity.get("name")),
        SOURCE_IDENTITY: canonical_json(stable_identity(identity)).decode(),
        SERIES_DIGEST: inputs.series_digest,
        EXPERIMENTAL: ",".join(inputs.experimental),
        TARGET: target.name,
        DEVICE_BACKENDS: "rpc" if RPC_CMAKE_FLAG in target.cmake_args else "",
        **cuda_labels(lock, target),
        BUILD_BASE: f"{target.build_base}@{inputs.build_base_id}",
        RUNTIME_BASE: f"{target.runtime_base}@{inputs.runtime_base_id}",
        INPUTS_DIGEST: inputs.digest(),
    }
    return labels


@dataclass(frozen=True)
class Drift:
    """One label whose value in the image differs from what the lock says now."""

    label: str
    in_image: str | None
    expected: str
    meaning: str


def lock_view(
    lock: Lock, target_name: str, series_digest: str, cuda_version: str | None = None
) -> dict[str, tuple[str, str]]:
    """label -> (value the lock implies now, what a difference means)."""
    target = lock.target_on(target_name, cuda_version or None)
    cuda = cuda_labels(lock, target)
    return {
        LOCK_DIGEST: (lock.digest, "built from another engine lock"),
        UPSTREAM_COMMIT: (lock.upstream.commit, "built against another upstream pin"),
        SERIES_DIGEST: (series_digest, "built with another patch series"),
        CUDA_ARCHITECTURES: (
            target.cuda.architectures if target.cuda else "",
            "built for other CUDA architectures",
        ),
        MIN_DRIVER: (cuda[MIN_DRIVER], "minimum driver differs"),
        CUDA_WHEELS: (cuda[CUDA_WHEELS], "built on other CUDA wheels"),
    }


def source_drift(lock: Lock, labels: dict[str, str]) -> list[Drift]:
    """A stand-in image must name a stand-in of this lock with the same sdist digest."""
    try:
        identity = parse_json(labels.get(SOURCE_IDENTITY, ""), SOURCE_IDENTITY)
    except ConfigError:
        return [
            Drift(
                SOURCE_IDENTITY,
                labels.get(SOURCE_IDENTITY),
                "a JSON identity",
                "source identity missing or unreadable",
            )
        ]
    kind = identity.get("kind")
    if kind == "stand-in":
        stand_in = lock.stand_ins.get(str(identity.get("name")))
        expected = stand_in.sdist_sha256 if stand_in else "(no such stand-in in the lock)"
        if identity.get("sdist_sha256") != expected:
            return [
                Drift(
                    SOURCE_IDENTITY,
                    str(identity.get("sdist_sha256")),
                    expected,
                    "built from a stand-in this lock does not pin",
                )
            ]
    elif kind == "canonical" and identity.get("upstream_commit") != lock.upstream.commit:
        return [
            Drift(
                SOURCE_IDENTITY,
                str(identity.get("upstream_commit")),
                lock.upstream.commit,
                "built from another upstream commit",
            )
        ]
    return []


def compare(lock: Lock, labels: dict[str, str], series_digest: str) -> list[Drift]:
    """Every difference between an image's labels and the lock; empty when it matches."""
    target_name = labels.get(TARGET)
    if not target_name or target_name not in lock.targets:
        return [
            Drift(
                TARGET,
                target_name,
                " | ".join(sorted(lock.targets)),
                "not an engine image of this lock (no known target label)",
            )
        ]
    cuda_version = labels.get(CUDA_VERSION) or None
    if cuda_version and cuda_version not in lock.cuda_toolkits:
        return [
            Drift(
                CUDA_VERSION,
                cuda_version,
                " | ".join(sorted(lock.cuda_toolkits)),
                "built on a CUDA version the lock does not name",
            )
        ]
    drifts = [
        Drift(label, labels.get(label), expected, meaning)
        for label, (expected, meaning) in lock_view(
            lock, target_name, series_digest, labels.get(CUDA_VERSION) or None
        ).items()
        if labels.get(label, "") != expected
    ]
    return drifts + source_drift(lock, labels)
