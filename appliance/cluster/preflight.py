"""Before any trial: which nodes of the cluster may run this run's trials, and why not the rest.

A node is refused, in one line naming it, when it runs another appliance version or engine
lock, has no engine image for the target or one built from other inputs (the image's inputs
digest label), or lacks the model file or holds one with another sha256.
"""

import time
from dataclasses import dataclass, field
from typing import Any

from appliance import __version__
from appliance.cluster.connect import alive_nodes, on_node
from appliance.cluster.node import node_report
from appliance.cluster.resources import resource_for
from appliance.core.errors import ApplianceError

PROBE_TIMEOUT_S = 1800  # a first sha256 of a large model on a node takes minutes


@dataclass(frozen=True)
class Expected:
    """What every node must match: the driver's own facts for this run."""

    target: str
    lock_digest: str
    inputs_digest: str
    model_path: str
    model_bytes: int
    model_sha256: str | None


@dataclass
class Admission:
    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def node_name(report: dict[str, Any]) -> str:
    return f"node {report['node_id'][:12]} ({report.get('hostname')})"


def refusal(report: dict[str, Any], expected: Expected) -> str | None:
    """Why this node may not run the run's trials, or None."""
    name = node_name(report)
    if report["appliance_version"] != __version__:
        return (
            f"{name} runs appliance {report['appliance_version']}, this driver "
            f"{__version__}: install the same version there"
        )
    if report["lock_digest"] != expected.lock_digest:
        return (
            f"{name} has engine lock {report['lock_digest'][:12]}, this run "
            f"{expected.lock_digest[:12]}: check out the same lock there"
        )
    image = report["images"].get(expected.target)
    if image is None:
        return (
            f"{name} has no engine image for {expected.target}: build it there with "
            f"`appliance image build --target {expected.target}`"
        )
    if image["inputs_digest"] != expected.inputs_digest:
        return (
            f"{name}: image {image['tag']} carries inputs digest "
            f"{str(image['inputs_digest'])[:12]}, this run's image "
            f"{expected.inputs_digest[:12]}: rebuild it there from the same lock and source"
        )
    model = report.get("model") or {}
    if not model.get("present"):
        return f"{name} has no model file {expected.model_path}: put it there at the same path"
    if expected.model_sha256 is not None and model.get("sha256") != expected.model_sha256:
        return (
            f"{name}: model {expected.model_path} has sha256 {str(model.get('sha256'))[:12]}"
            f", this run's {expected.model_sha256[:12]}: copy the same file there"
        )
    return None


def admit(address: str, expected: Expected) -> Admission:
    """Probe every live node offering the target's resource; accept those that match."""
    import ray

    resource = resource_for(expected.target)
    candidates = [n for n in alive_nodes() if n.get("Resources", {}).get(resource, 0) > 0]
    if not candidates:
        raise ApplianceError(
            f"no node of the cluster at {address} offers {resource}: run "
            f"`appliance cluster join {address}` on a machine that can run "
            f"{expected.target}"
        )
    refs = [
        on_node(
            n["NodeID"], node_report, [expected.target], expected.model_path, name="appliance-node-report"
        )
        for n in candidates
    ]
    admission = Admission()
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    for node, ref in zip(candidates, refs, strict=True):
        try:
            report = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except ray.exceptions.RayError as exc:
            # a node that died after it was listed (not yet marked dead) cannot run trials
            admission.refused.append(
                f"node {str(node['NodeID'])[:12]} "
                f"({node.get('NodeManagerHostname')}) did not answer the "
                f"preflight probe ({type(exc).__name__}): it is skipped"
            )
            continue
        why = refusal(report, expected)
        if why is None:
            admission.accepted.append(report)
        else:
            admission.refused.append(why)
    return admission
