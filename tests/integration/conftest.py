"""Integration fixtures: the cpu engine image is built once per run and shared."""

from tests.engine_image import engine_image_cpu  # noqa: F401 - a fixture, used by name
