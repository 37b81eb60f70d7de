"""Image labels against the lock: what matches, what drifts, and what the tag says."""

import ast
import copy
import json
import re

from appliance.engine.lock import load_lock, parse_lock
from appliance.engine.patches import series_digest
from appliance.images import labels as L
from tests.conftest import REPO

STAND_IN_IDENTITY = {
    "kind": "stand-in",
    "name": "b10229",
    "package": "xllamacpp",
    "version": "2026.8.10229",
    "upstream_release": "b10229",
    "tree_digest": "ab" * 32,
    "canonical": False,
    "fetched_at": "2026-11-29T12:00:00+00:00",
}


def _inputs(lock, identity=None, series="11" * 32, target=None):  # type: ignore[no-untyped-def]
    identity = identity or dict(STAND_IN_IDENTITY, sdist_sha256=lock.stand_ins["b10229"].sdist_sha256)
    return L.BuildInputs(
        lock_digest=lock.digest,
        target=target or lock.target("cpu"),
        identity=identity,
        series_digest=series,
        experimental=(),
        dockerfile_sha256="22" * 32,
        build_base_id="sha256:" + "33" * 32,
        runtime_base_id="sha256:" + "44" * 32,
        build_args={"TOOLS": "llama-moe-trace llama-completion llama-bench"},
    )


def test_labels_of_a_build_match_the_lock_they_came_from() -> None:
    lock = load_lock()
    labels = L.expected_labels(lock, _inputs(lock), "2026-11-29T12:00:00Z")
    assert L.compare(lock, labels, "11" * 32) == []
    assert json.loads(labels[L.SOURCE_IDENTITY])["name"] == "b10229"
    assert "fetched_at" not in labels[L.SOURCE_IDENTITY]


def test_a_gpu_image_names_its_cuda_build_in_labels() -> None:
    lock = load_lock()
    labels = L.expected_labels(lock, _inputs(lock, target=lock.target("sm120")), "2026-11-29T12:00:00Z")
    assert labels[L.TARGET] == "sm120"
    assert (labels[L.CUDA_SASS], labels[L.CUDA_PTX]) == ("120a", "90")
    assert labels[L.CUDA_ARCHITECTURES] == "120a-real;90-virtual"
    assert (labels[L.CUDA_VERSION], labels[L.MIN_DRIVER]) == ("13.0.2", "580.95.05")
    assert labels[L.BASE_KIND] == "pypi-wheels"
    wheels = json.loads(labels[L.CUDA_WHEELS])
    assert wheels == {w.file: w.sha256 for w in lock.cuda_toolkit("13.0.2").wheels} and len(wheels) == 6
    assert L.compare(lock, labels, "11" * 32) == []
    assert L.cuda_summary(labels) == (
        "CUDA 13.0.2 on pypi-wheels bases, SASS 120a + PTX 90, needs NVIDIA driver 580.95.05 or newer"
    )
    cpu = L.expected_labels(lock, _inputs(lock), "2026-11-29T12:00:00Z")
    assert (cpu[L.BASE_KIND], cpu[L.CUDA_WHEELS], cpu[L.CUDA_VERSION]) == ("debian", "", "")
    assert L.cuda_summary(cpu) == ""


def test_other_wheels_or_an_unknown_cuda_version_are_drift() -> None:
    lock = load_lock()
    labels = L.expected_labels(lock, _inputs(lock, target=lock.target("sm89")), "2026-11-29T12:00:00Z")
    (drift,) = L.compare(lock, dict(labels, **{L.CUDA_WHEELS: "{}"}), "11" * 32)
    assert drift.label == L.CUDA_WHEELS and drift.meaning == "built on other CUDA wheels"
    (drift,) = L.compare(lock, dict(labels, **{L.CUDA_VERSION: "12.4.1"}), "11" * 32)
    assert drift.label == L.CUDA_VERSION and drift.meaning == "built on a CUDA version the lock does not name"


def test_a_build_on_another_cuda_toolkit_is_tagged_and_labelled_as_such() -> None:
    lock = load_lock()
    target = lock.target_on("sm89", "12.8.1")
    assert target.build_base.startswith("nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:")
    labels = L.expected_labels(lock, _inputs(lock, target=target), "2026-11-29T12:00:00Z")
    assert (labels[L.BASE_KIND], labels[L.MIN_DRIVER], labels[L.CUDA_WHEELS]) == (
        "nvidia-cuda",
        "570.124.06",
        "",
    )
    assert L.compare(lock, labels, "11" * 32) == []
    tag = L.image_tag(lock, "sm89", STAND_IN_IDENTITY, cuda_version="12.8.1")
    assert tag.endswith("-standin-b10229-cuda12.8.1")


def test_another_series_is_drift() -> None:
    lock = load_lock()
    labels = L.expected_labels(lock, _inputs(lock), "2026-11-29T12:00:00Z")
    drifts = L.compare(lock, labels, "99" * 32)
    assert [(d.label, d.in_image, d.expected) for d in drifts] == [(L.SERIES_DIGEST, "11" * 32, "99" * 32)]


def test_a_stand_in_the_lock_does_not_pin_is_drift() -> None:
    lock = load_lock()
    identity = dict(STAND_IN_IDENTITY, sdist_sha256="55" * 32)
    labels = L.expected_labels(lock, _inputs(lock, identity), "2026-11-29T12:00:00Z")
    (drift,) = L.compare(lock, labels, "11" * 32)
    assert drift.label == L.SOURCE_IDENTITY and drift.in_image == "55" * 32


def test_an_image_without_engine_labels_is_not_an_engine() -> None:
    (drift,) = L.compare(load_lock(), {"maintainer": "someone"}, "11" * 32)
    assert drift.label == L.TARGET and "not an engine image" in drift.meaning


def test_publishing_does_not_change_the_engine_lock_digest_but_targets_do() -> None:
    lock = load_lock()
    raw = copy.deepcopy(lock.raw)
    raw["published_images"] = {"cpu": {"reference": "registry/x@sha256:" + "0" * 64}}
    published = parse_lock(raw, lock.path)
    assert published.digest == lock.digest
    raw["targets"]["cpu"]["cmake_args"] = [*raw["targets"]["cpu"]["cmake_args"], "-DX=1"]
    assert parse_lock(raw, lock.path).digest != lock.digest


def test_inputs_digest_ignores_fetch_time_but_not_the_tree() -> None:
    lock = load_lock()
    first = _inputs(lock).digest()
    later = _inputs(
        lock,
        dict(
            STAND_IN_IDENTITY,
            fetched_at="2030-01-01T00:00:00+00:00",
            sdist_sha256=lock.stand_ins["b10229"].sdist_sha256,
        ),
    ).digest()
    other_tree = _inputs(
        lock,
        dict(STAND_IN_IDENTITY, tree_digest="cd" * 32, sdist_sha256=lock.stand_ins["b10229"].sdist_sha256),
    ).digest()
    assert first == later != other_tree


def test_tags_name_the_target_lock_and_non_canonical_sources() -> None:
    lock = load_lock()
    digest12 = lock.digest[:12]
    assert L.image_tag(lock, "sm120", {"kind": "canonical"}) == f"moe-expert-cache:sm120-{digest12}"
    assert L.image_tag(lock, "cpu", STAND_IN_IDENTITY) == (f"moe-expert-cache:cpu-{digest12}-standin-b10229")
    assert L.image_tag(
        lock, "cpu", {"kind": "local", "tree_digest": "ef" * 32}, ["prefetch"], "12345678" * 8
    ) == (f"moe-expert-cache:cpu-{digest12}-local-{'ef' * 6}-exp-12345678")


def test_candidate_tags_put_the_canonical_source_first() -> None:
    lock = load_lock()
    digest12 = lock.digest[:12]
    assert L.candidate_tags(lock, "cpu") == [
        f"moe-expert-cache:cpu-{digest12}",
        f"moe-expert-cache:cpu-{digest12}-standin-b10229",
        f"moe-expert-cache:cpu-{digest12}-standin-b10068",
    ]


def test_each_candidate_image_carries_its_stand_in() -> None:
    lock = load_lock()
    pairs = L.candidate_images(lock, "cpu")
    assert [tag for tag, _ in pairs] == L.candidate_tags(lock, "cpu")
    assert [stand_in for _, stand_in in pairs] == [None, "b10229", "b10068"]
    assert L.stand_in_of_labels({L.SOURCE_KIND: "stand-in", L.SOURCE_NAME: "b10068"}) == "b10068"
    assert L.stand_in_of_labels({L.SOURCE_KIND: "canonical", L.SOURCE_NAME: "None"}) is None
    assert L.stand_in_of_labels({}) is None


def test_a_profiles_experimental_patches_name_images_that_carry_them() -> None:
    lock = load_lock()
    digest12 = lock.digest[:12]
    series = series_digest(lock, ["0004-expert-cache.patch"])[:8]
    assert L.candidate_tags(lock, "cpu") == [tag for tag, _ in L.candidate_images(lock, "cpu", ())]
    assert [tag for tag, _ in L.candidate_images(lock, "cpu", ["0004-expert-cache.patch"])] == [
        f"moe-expert-cache:cpu-{digest12}-exp-{series}",
        f"moe-expert-cache:cpu-{digest12}-standin-b10229-exp-{series}",
        f"moe-expert-cache:cpu-{digest12}-standin-b10068-exp-{series}",
    ]
    labels = {L.EXPERIMENTAL: "0004-expert-cache.patch"}
    assert L.missing_experimental(labels, ["0004-expert-cache.patch"]) == []
    assert L.missing_experimental({}, ["0004-expert-cache.patch"]) == ["0004-expert-cache.patch"]
    assert L.missing_experimental({L.EXPERIMENTAL: ""}, []) == []


def _label_values() -> set[str]:
    return {
        v
        for k, v in vars(L).items()
        if k.isupper() and isinstance(v, str) and v.startswith((f"{L.OWN}.", f"{L.OCI}."))
    }


def test_label_keys_live_only_in_the_labels_module_under_one_namespace() -> None:
    """No other module spells a label key; docs name only keys the module defines."""
    spelled = []
    for path in sorted((REPO / "appliance").rglob("*.py")):
        if path.name == "labels.py" and path.parent.name == "images":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.search(r"\b(io|org)\.(moe-appliance|opencontainers)\.", node.value)
            ):
                spelled.append(f"{path.relative_to(REPO)}: {node.value!r}")
    assert spelled == []
    assert all(v.startswith(("io.moe-appliance.", "org.opencontainers.image.")) for v in _label_values())
    documented = set()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        documented |= set(re.findall(r"io\.moe-appliance\.[a-z][a-z.-]*[a-z]", doc.read_text()))
    assert documented and documented <= _label_values(), documented - _label_values()
