"""Which local image `image push` and `image export` take by default: the newest one built from
the lock *without* experimental patches. An image with patch 0004 on top (the expert-cache sweep
builds one from the same lock) is not the target's image and is taken only when named with
--image. Real Docker; the images are label-only (`FROM scratch`) under a lock of their own."""

import dataclasses
import io
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock, load_lock
from appliance.images import labels as L
from appliance.images.registry import choose_local_image
from appliance.runs.prepare import find_image

pytestmark = [pytest.mark.docker]


@pytest.fixture
def own_lock() -> Lock:
    lock = load_lock()
    return dataclasses.replace(lock, raw={**lock.raw, "test_run": uuid.uuid4().hex})  # a digest no image has


@pytest.fixture
def build_label_image(docker_client: Any, own_lock: Lock) -> Iterator[Callable[[str, str], str]]:
    """build(name, experimental) -> the tag of a label-only cpu image built from `own_lock`."""
    made: list[str] = []

    def build(name: str, experimental: str) -> str:
        tag = f"{L.IMAGE_REPOSITORY}:cpu-choice-{name}-{own_lock.digest[:12]}"
        labels = {L.TARGET: "cpu", L.LOCK_DIGEST: own_lock.digest, L.EXPERIMENTAL: experimental}
        docker_client.images.build(fileobj=io.BytesIO(b"FROM scratch\n"), tag=tag, labels=labels, rm=True)
        made.append(tag)
        return tag

    try:
        yield build
    finally:
        for tag in made:
            docker_client.images.remove(tag, force=True)


def test_an_image_with_experimental_patches_is_not_the_default(
    docker_client: Any, own_lock: Lock, build_label_image: Callable[[str, str], str]
) -> None:
    experimental = build_label_image("experimental", "0004-expert-cache.patch")
    with pytest.raises(ApplianceError, match="^no local cpu image built from this lock without") as info:
        choose_local_image(docker_client, own_lock, "cpu", None)
    assert str(info.value) == (
        "no local cpu image built from this lock without experimental patches: run "
        "`appliance image build --target cpu` first, or name one with --image"
    )
    plain = build_label_image("plain", "")
    build_label_image("experimental-newer", "0004-expert-cache.patch")  # the newest, still not taken
    assert choose_local_image(docker_client, own_lock, "cpu", None) == plain
    assert choose_local_image(docker_client, own_lock, "cpu", experimental) == experimental


def test_an_image_name_docker_cannot_parse_is_one_line(docker_client: Any) -> None:
    with pytest.raises(ApplianceError, match=r"^image '--unsigned': ") as caught:
        find_image(docker_client, [("--unsigned", None)])
    message = str(caught.value)
    assert message.startswith("image '--unsigned': ") and "invalid reference format" in message
    assert message.endswith("name a local image as REPOSITORY:TAG (`docker images` lists them)")
    assert "\n" not in message
