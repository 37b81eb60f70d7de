"""The Ray trial executor: each trial on an admitted node, its directory shipped home.

The driver keeps the queue: a trial goes to a free admitted node as a Ray task pinned there
and holding the node's `appliance-<target>` unit, so a node runs one trial at a time. Nodes
on one host (the same kernel boot id) share its page cache and disk, and a trial beside
another would read the other's pages (`appliance.analysis.contamination` flags that): such
nodes take one trial at a time between them, unless the driver is told each node has its own
disk and page cache (`APPLIANCE_CLUSTER_ISOLATED_NODES=1`, docs/cluster.md). The
task returns the trial directory as a tar through Ray's object store; it is unpacked next to
the run directory and renamed into `trials/` whole. A trial whose node is lost is started
again on another node (at most `max_attempts` in all); its trial.json lists every attempt.
A trial no node can take is recorded as failed and the run goes on. Ctrl-C cancels what
runs, starts nothing more, and records the running trials as interrupted.
"""

import io
import os
import shutil
import tarfile
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from appliance.cluster.connect import alive_nodes, on_node
from appliance.cluster.node import run_trial_here
from appliance.cluster.resources import resource_for
from appliance.core import atomic
from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json
from appliance.runs.executor import OneTrial, OnStart
from appliance.runs.plan import Trial
from appliance.runs.profile import Profile
from appliance.runs.records import Attempt, TrialRecord
from appliance.runs.run_dir import RunDir, TrialDir
from appliance.runs.status import TrialStatus
from appliance.runs.trial import INTERRUPT_STOP_S, TrialJob, base_record, exit_now, utc_now

WAIT_S = 2.0
CANCEL_WAIT_S = INTERRUPT_STOP_S  # a node stops its trial's container within this after Ctrl-C
# Set to 1 when every node of the cluster has its own disk and page cache, even where several
# share one host: then nodes on one host run trials at the same time.
ISOLATED_NODES_ENV = "APPLIANCE_CLUSTER_ISOLATED_NODES"


def isolated_nodes() -> bool:
    """Whether the driver was told each node has its own disk and page cache."""
    value = os.environ.get(ISOLATED_NODES_ENV, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"{ISOLATED_NODES_ENV} must be 0 or 1, got {value!r}")
    return value == "1"


def host_of(report: dict[str, Any]) -> str:
    """What nodes on one machine share: the kernel's boot id (the host name for a node that
    does not report one)."""
    return str(report.get("boot_id") or f"hostname:{report.get('hostname')}")


def not_run(
    trial: Trial,
    profile: Profile,
    attempts: list[Attempt],
    error: str | None = None,
    node: dict[str, Any] | None = None,
) -> TrialRecord:
    """The record of a trial that did not run to its end on a node: given up (`error`: why;
    failed and unscheduled) or interrupted on `node` by Ctrl-C."""
    interrupted = node is not None
    return TrialRecord(
        **base_record(trial, profile),
        status=TrialStatus.INTERRUPTED if interrupted else TrialStatus.FAILED,
        exit_code=None,
        oom_killed=False,
        interrupted=True if interrupted else None,
        error=error,
        unscheduled=None if interrupted else True,
        node=node,
        attempts=tuple(attempts),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}"


class RayExecutor:
    def __init__(
        self,
        address: str,
        target: str,
        inputs_digest: str,
        nodes: list[dict[str, Any]],
        refused: list[str],
        max_attempts: int = 3,
        isolated: bool = False,
    ) -> None:
        self.address = address
        self.target = target
        self.inputs_digest = inputs_digest
        self.nodes = {n["node_id"]: n for n in nodes}
        self.refused = refused
        self.max_attempts = max_attempts
        self.isolated = isolated
        self.trial_nodes: dict[str, str | None] = {}
        self.lost: list[str] = []

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "ray",
            "address": self.address,
            "resource": resource_for(self.target),
            "nodes": [{"node_id": n, "hostname": r.get("hostname")} for n, r in sorted(self.nodes.items())],
            "refused": self.refused,
            "lost": self.lost,
            "max_attempts": self.max_attempts,
            "isolated_nodes": self.isolated,
            "trial_nodes": dict(sorted(self.trial_nodes.items())),
        }

    def _place(
        self, run_dir: Path, trial: Trial, archive: bytes, node: dict[str, Any], attempts: list[Attempt]
    ) -> dict[str, Any]:
        """Unpack a trial directory next to the run and rename it into trials/ whole, its
        record (read strictly) completed with the node and the attempts."""
        layout = RunDir(run_dir)
        staging = layout.scratch_for(f"{trial.name}.incoming")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        incoming = TrialDir(staging)
        source = f"{trial.name}: the node's {incoming.record_file.name}"
        typed = replace(
            TrialRecord.from_json(load_json(incoming.record_file), source),
            node=node,
            attempts=tuple(attempts),
        )
        record = typed.to_json()
        atomic.write_json(incoming.record_file, record)
        final = layout.trial(trial.name).path
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        return record

    def _record_only(self, run_dir: Path, record: TrialRecord) -> dict[str, Any]:
        """trial.json of a trial that did not run to its end here (its name is its directory's)."""
        written = record.to_json()
        atomic.write_json(RunDir(run_dir).trial(str(record.name)).record_file, written)
        return written

    def run(
        self, job: OneTrial, trials: Sequence[Trial], run_dir: Path, on_start: OnStart | None = None
    ) -> Iterator[dict[str, Any]]:
        if not isinstance(job, TrialJob):
            raise TypeError("the Ray executor ships a TrialJob to its nodes")
        import ray

        # nodes find the model at the same absolute path (their working directory differs)
        job = replace(
            job,
            model=replace(job.model, path=job.model.path.resolve()),
            settings=replace(job.settings, models_dir=job.settings.models_dir.resolve()),
        )

        queue: deque[Trial] = deque(trials)
        attempts: dict[str, list[Attempt]] = {t.name: [] for t in trials}
        usable = set(self.nodes)
        free = [n for n in self.nodes if n in usable]
        running: dict[Any, tuple[Trial, str, str]] = {}
        try:
            while queue or running:
                alive = {n["NodeID"] for n in alive_nodes()}
                usable &= alive
                free = [n for n in free if n in usable]
                while queue and (node := self._next_node(free, running)) is not None:
                    trial = queue.popleft()
                    free.remove(node)
                    ref = on_node(
                        node,
                        run_trial_here,
                        job,
                        trial,
                        self.target,
                        self.inputs_digest,
                        resources={resource_for(self.target): 1},
                        name=f"appliance-trial-{trial.name}",
                    )
                    running[ref] = (trial, node, utc_now())
                    if on_start is not None:
                        on_start(trial, f"node {node[:8]} ({self.nodes[node].get('hostname')})")
                if not running:  # trials are left and no node can take them
                    while queue:
                        trial = queue.popleft()
                        yield self._record_only(
                            run_dir,
                            not_run(
                                trial,
                                job.profile,
                                attempts[trial.name],
                                error=f"no admitted node with {resource_for(self.target)} is left to run it",
                            ),
                        )
                    break
                ready, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_S)
                for ref in ready:
                    trial, node, started = running.pop(ref)
                    try:
                        where, archive = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:  # the node said no, or broke
                        attempts[trial.name].append(
                            Attempt(node, started, utc_now(), error=_first_line(exc.cause or exc))
                        )
                        free.append(node)
                        yield from self._retry_or_give_up(job, queue, trial, attempts, run_dir)
                        continue
                    except ray.exceptions.RayError as exc:  # node or worker lost
                        attempts[trial.name].append(
                            Attempt(node, started, utc_now(), error=f"node lost: {_first_line(exc)}")
                        )
                        usable.discard(node)
                        self.lost.append(node)
                        yield from self._retry_or_give_up(job, queue, trial, attempts, run_dir)
                        continue
                    free.append(node)
                    attempts[trial.name].append(
                        Attempt(node, started, utc_now(), status=TrialStatus(where["status"]))
                    )
                    self.trial_nodes[trial.name] = node
                    yield self._place(run_dir, trial, archive, where["node"], attempts[trial.name])
        except KeyboardInterrupt:
            self._cancel(job, running, run_dir, attempts)
            raise

    def _next_node(self, free: list[str], running: dict[Any, tuple[Trial, str, str]]) -> str | None:
        """The first free node whose host runs no trial now (any free node when isolated)."""
        busy = {host_of(self.nodes[node]) for _, node, _ in running.values()}
        return next((n for n in free if self.isolated or host_of(self.nodes[n]) not in busy), None)

    def _retry_or_give_up(
        self,
        job: TrialJob,
        queue: deque[Trial],
        trial: Trial,
        attempts: dict[str, list[Attempt]],
        run_dir: Path,
    ) -> Iterator[dict[str, Any]]:
        """Back to the front of the queue, or recorded as failed after max_attempts."""
        if len(attempts[trial.name]) < self.max_attempts:
            queue.appendleft(trial)
            return
        yield self._record_only(
            run_dir,
            not_run(
                trial,
                job.profile,
                attempts[trial.name],
                error=f"gave up after {len(attempts[trial.name])} attempts",
            ),
        )

    def _cancel(
        self,
        job: TrialJob,
        running: dict[Any, tuple[Trial, str, str]],
        run_dir: Path,
        attempts: dict[str, list[Attempt]],
    ) -> None:
        """Ctrl-C: each running task gets a KeyboardInterrupt (its container is stopped and
        removed on the node); the trials are recorded here as interrupted."""
        import ray

        for ref in running:
            ray.cancel(ref)
        try:
            ray.wait(list(running), num_returns=len(running), timeout=CANCEL_WAIT_S)
        except KeyboardInterrupt:
            names = ", ".join(trial.name for trial, _, _ in running.values())
            exit_now(f"the containers of trials {names} may still run on their nodes and have no record")
        for trial, node, started in running.values():
            attempts[trial.name].append(Attempt(node, started, utc_now(), error="interrupted"))
            self._record_only(
                run_dir,
                not_run(
                    trial,
                    job.profile,
                    attempts[trial.name],
                    node={"node_id": node, "hostname": self.nodes[node].get("hostname")},
                ),
            )
