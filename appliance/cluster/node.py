"""What runs on a node: its report (version, lock, images, model) and one trial, packed to travel.

These functions execute inside Ray worker processes on the node, against the node's own Docker
engine and files; the driver only sees what they return.
"""

import contextlib
import io
import os
import socket
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.attest.provenance import host_facts
from appliance.cluster.resources import node_image_overrides
from appliance.core.errors import ApplianceError, ConfigError
from appliance.core.strict_load import read_text
from appliance.engine.lock import load_lock
from appliance.host.cgroups import block_device_for, cgroup_version
from appliance.host.docker import docker_client
from appliance.images.labels import INPUTS_DIGEST, RUN, RUN_TRIAL, candidate_tags
from appliance.runs.model_files import cached_sha256
from appliance.runs.plan import Trial
from appliance.runs.run_dir import RunDir
from appliance.runs.trial import TrialJob

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def boot_id() -> str | None:
    """This kernel's boot id: nodes that share it share one page cache (and usually a disk)."""
    try:
        return read_text(BOOT_ID, max_bytes=64).strip() or None
    except ConfigError:
        return None


def node_identity(client: Any = None) -> dict[str, Any]:
    """Who ran a trial: Ray node id, host name, kernel boot id and the host facts provenance
    records."""
    return {
        "node_id": node_id(),
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),
        "host": host_facts(client),
    }


def node_image(client: Any, target: str) -> tuple[str, Any] | None:
    """(tag, image) this node uses for target: its --image choice, else the lock's tags."""
    import docker.errors

    override = node_image_overrides().get(target)
    tags = [override] if override else candidate_tags(load_lock(), target)
    for tag in tags:
        try:
            return tag, client.images.get(tag)
        except docker.errors.ImageNotFound:
            continue
    return None


def node_report(targets: list[str], model_path: str | None) -> dict[str, Any]:
    """Everything the driver checks before a run: versions, images, the model's digest."""
    client = docker_client()
    report: dict[str, Any] = {
        **node_identity(client),
        "appliance_version": __version__,
        "lock_digest": load_lock().digest,
        "images": {},
    }
    for target in targets:
        found = node_image(client, target)
        report["images"][target] = (
            None
            if found is None
            else {
                "tag": found[0],
                "id": found[1].id,
                "inputs_digest": (found[1].labels or {}).get(INPUTS_DIGEST),
            }
        )
    if model_path is not None:
        path = Path(model_path)
        if not path.is_file():
            report["model"] = {"present": False}
        else:
            digest, _ = cached_sha256(path)
            report["model"] = {"present": True, "bytes": path.stat().st_size, "sha256": digest}
    return report


def _remove_leftovers(client: Any, run_id: str, trial: Trial) -> None:
    """A container of an earlier attempt of this trial (its node lost) may still hold the name."""
    import docker.errors

    filters = {"label": [f"{RUN}={run_id}", f"{RUN_TRIAL}={trial.name}"]}
    for container in client.containers.list(all=True, filters=filters):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def pack(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(directory.iterdir()):
            archive.add(path, arcname=path.name)
    return buffer.getvalue()


def run_trial_here(
    job: TrialJob, trial: Trial, target: str, inputs_digest: str
) -> tuple[dict[str, Any], bytes]:
    """One trial on this node with this node's image for target, which must carry the run's
    inputs digest; returns (node, image and record) and the trial directory as a tar."""
    client = docker_client()
    found = node_image(client, target)
    if found is None:
        raise ApplianceError(f"no engine image for {target} on this node")
    tag, image = found
    carried = (image.labels or {}).get(INPUTS_DIGEST)
    if carried != inputs_digest:
        raise ApplianceError(
            f"image {tag} carries inputs digest {carried}, the run needs {inputs_digest}: refused"
        )
    settings = replace(
        job.settings,
        block_device=block_device_for(job.model.path),
        cgroup_version=cgroup_version(),
        user=f"{os.getuid()}:{os.getgid()}",
    )
    here = replace(
        job,
        engine=replace(job.engine, image=tag),  # type: ignore[type-var]
        settings=settings,
    )
    _remove_leftovers(client, job.run_id, trial)
    with tempfile.TemporaryDirectory(prefix="appliance-trial-") as work:
        record = here(trial, Path(work))
        archive = pack(RunDir(Path(work)).trial(trial.name).path)
    where = {**node_identity(client), "image": {"tag": tag, "id": image.id}}
    return {"node": where, "status": record["status"]}, archive
