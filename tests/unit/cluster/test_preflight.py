"""Node admission: every reason a node is refused is one line naming it; a matching node passes."""

from typing import Any

import pytest

from appliance import __version__
from appliance.cluster.preflight import Expected, refusal

EXPECTED = Expected(
    target="cpu",
    lock_digest="a" * 64,
    inputs_digest="b" * 64,
    model_path="/data/models/tiny.gguf",
    model_bytes=1000,
    model_sha256="c" * 64,
)


def report(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "node_id": "f" * 56,
        "hostname": "lab-2",
        "appliance_version": __version__,
        "lock_digest": "a" * 64,
        "images": {"cpu": {"tag": "moe-expert-cache:cpu-x", "id": "sha256:1", "inputs_digest": "b" * 64}},
        "model": {"present": True, "bytes": 1000, "sha256": "c" * 64},
    }
    base.update(changes)
    return base


def test_a_matching_node_is_admitted() -> None:
    assert refusal(report(), EXPECTED) is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"appliance_version": "0.0.1"}, "runs appliance 0.0.1, this driver " + __version__),
        ({"lock_digest": "d" * 64}, "has engine lock dddddddddddd, this run aaaaaaaaaaaa"),
        ({"images": {"cpu": None}}, "has no engine image for cpu: build it there"),
        (
            {"images": {"cpu": {"tag": "t", "id": "i", "inputs_digest": "e" * 64}}},
            "image t carries inputs digest eeeeeeeeeeee, this run's image bbbbbbbbbbbb",
        ),
        ({"model": {"present": False}}, "has no model file /data/models/tiny.gguf"),
        (
            {"model": {"present": True, "bytes": 1000, "sha256": "9" * 64}},
            "model /data/models/tiny.gguf has sha256 999999999999, this run's cccccccccccc",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_node(changes: dict[str, Any], expected: str) -> None:
    why = refusal(report(**changes), EXPECTED)
    assert why is not None and "\n" not in why
    assert why.startswith(f"node {'f' * 12} (lab-2)")
    assert expected in why


def test_an_unpinned_model_is_not_compared_by_digest() -> None:
    unpinned = Expected(**{**EXPECTED.__dict__, "model_sha256": None})
    assert refusal(report(model={"present": True, "bytes": 1000, "sha256": "9" * 64}), unpinned) is None
