"""engine.Dockerfile: compiled objects are reused through one BuildKit cache mount, which the
classic builder's copy of the file drops."""

from appliance.images.base import PACKAGES
from appliance.images.builders import classic_dockerfile, dockerfile_path


def test_one_cache_mount_for_ccache_in_the_build_stage() -> None:
    text = dockerfile_path().read_text()
    mounts = [line for line in text.splitlines() if line.startswith("RUN --mount")]
    assert mounts == ["RUN --mount=type=cache,target=/ccache,id=moe-appliance-ccache \\"]
    build_stage = text.split("AS runtime")[0]
    assert "--mount=type=cache" in build_stage
    assert "CCACHE_DIR=/ccache" in build_stage
    assert "ccache" in PACKAGES["build"] and "ccache" not in PACKAGES["runtime"]


def test_the_classic_builder_gets_the_same_steps_without_the_mount() -> None:
    text = dockerfile_path().read_text()
    classic = classic_dockerfile(text)
    assert "RUN --mount" not in classic
    assert classic.splitlines() == [
        line.replace("RUN --mount=type=cache,target=/ccache,id=moe-appliance-ccache \\", "RUN \\")
        for line in text.splitlines()
    ]
