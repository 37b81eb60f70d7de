"""An engine image's labels against the lock and the patch series: what `appliance image
inspect` shows, and what a push, a pull and an archive load check before they trust an image.
"""

from dataclasses import dataclass
from typing import Any

from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock
from appliance.engine.patches import series_digest
from appliance.host.docker import docker_client
from appliance.images import labels as L
from appliance.images.base import local_image


@dataclass
class InspectReport:
    ref: str
    image_id: str
    size_bytes: int
    labels: dict[str, str]
    drifts: list[L.Drift]

    @property
    def matches(self) -> bool:
        return not self.drifts


def inspect_labels(
    lock: Lock, ref: str, labels: dict[str, str], image_id: str = "", size_bytes: int = 0
) -> InspectReport:
    """Compare labels with the lock and the series (with the image's experimental patches)."""
    experimental = L.experimental_of_labels(labels)
    try:
        series = series_digest(lock, experimental)
    except ApplianceError as exc:
        series = f"(series not computable: {exc})"
    return InspectReport(ref, image_id, size_bytes, labels, L.compare(lock, labels, series))


def inspect_image(lock: Lock, ref: str, client: Any | None = None) -> InspectReport:
    """Inspect an image by reference, or by target name (its local image for this lock)."""
    client = client or docker_client()
    if ref in lock.targets:
        found = [tag for tag in L.candidate_tags(lock, ref) if local_image(client, tag) is not None]
        if not found:
            raise ApplianceError(
                f"no local {ref} engine image of this lock: build it (`make image-{ref}`) "
                "or `appliance pull` it"
            )
        ref = found[0]
    image = local_image(client, ref)
    if image is None:
        raise ApplianceError(
            f"no local image {ref}: build it (`appliance image build`) or `appliance pull` it"
        )
    return inspect_labels(lock, ref, dict(image.labels or {}), image.id, int(image.attrs.get("Size", 0)))


def drift_message(report: InspectReport) -> str:
    meanings = "; ".join(sorted({d.meaning for d in report.drifts}))
    target = report.labels.get(L.TARGET, "TARGET")
    return (
        f"image {report.ref} does not match the lock ({meanings}): rebuild it with "
        f"`appliance image build --target {target}`"
    )
