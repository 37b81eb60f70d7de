"""`--cluster ADDRESS` for a run: connect, admit nodes, and hand back the Ray executor.

Everything here happens before the run directory is written: an unreachable address, a
cluster without a node for the target, or a cluster whose every node is refused is one line.
"""

from collections.abc import Callable

from rich.console import Console

from appliance.cluster.connect import connect
from appliance.cluster.executor import RayExecutor, isolated_nodes
from appliance.cluster.preflight import Expected, admit, node_name
from appliance.core.errors import ApplianceError
from appliance.engine.lock import Lock
from appliance.host.docker import docker_client
from appliance.images.labels import INPUTS_DIGEST
from appliance.runs.prepare import PreparedRun

DEFAULT_MAX_ATTEMPTS = 3


def expected_of(prepared: PreparedRun, lock: Lock) -> Expected:
    """The driver's own image and model: what every node must match."""
    target = prepared.choice.target
    if target is None:
        raise ApplianceError("a cluster run needs a resolved target (not auto without a GPU)")
    labels = docker_client().images.get(prepared.image).labels or {}
    inputs_digest = labels.get(INPUTS_DIGEST)
    if not inputs_digest:
        raise ApplianceError(
            f"image {prepared.image} carries no {INPUTS_DIGEST} label: a "
            "cluster run needs an engine image built by `appliance image build`"
        )
    model = prepared.model
    return Expected(target, lock.digest, inputs_digest, str(model.path.resolve()), model.bytes, model.sha256)


def cluster_executor(
    address: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> Callable[[PreparedRun, Lock, Console], RayExecutor]:
    """The executor factory `execute_profile` calls once the run is prepared."""
    if max_attempts < 1:
        raise ApplianceError("--max-attempts must be at least 1")
    isolated = isolated_nodes()  # nodes on one host share its page cache unless told otherwise

    def make(prepared: PreparedRun, lock: Lock, console: Console) -> RayExecutor:
        future = next((t for t in prepared.trials if t.future), None)
        if future is not None:
            raise ApplianceError(
                f"variant {future.variant.name} takes its --future from trial {future.future}'s "
                "trace, which a cluster's nodes cannot order or share: run it without --cluster"
            )
        expected = expected_of(prepared, lock)
        connect(address)
        admission = admit(address, expected)
        for line in admission.refused:
            console.print(f"[yellow]refused[/yellow]: {line}")
        if not admission.accepted:
            raise ApplianceError(
                f"no node of the cluster at {address} can run this run's "
                f"trials ({len(admission.refused)} refused, see above)"
            )
        for report in admission.accepted:
            console.print(f"admitted: {node_name(report)}, image {report['images'][expected.target]['tag']}")
        return RayExecutor(
            address,
            expected.target,
            expected.inputs_digest,
            admission.accepted,
            admission.refused,
            max_attempts,
            isolated,
        )

    return make
