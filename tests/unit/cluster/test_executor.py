"""The record of a trial the cluster did not run to its end: one constructor (`not_run`) for
the given-up and the interrupted trial, written where the trial's directory would be.

Nodes on one host (one kernel boot id) share its page cache: the Ray executor gives them one
trial at a time between them, unless APPLIANCE_CLUSTER_ISOLATED_NODES=1 says each node has
its own disk and page cache. Runs without Ray: only the choice of the next node."""

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster.executor import ISOLATED_NODES_ENV, RayExecutor, host_of, isolated_nodes, not_run
from appliance.core.errors import ConfigError
from appliance.runs.plan import trial_plan
from appliance.runs.profile import load_profile
from appliance.runs.records import Attempt, TrialRecord

ATTEMPT = Attempt("node-a", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", error="node lost: gone")


def test_a_trial_given_up_is_failed_and_unscheduled() -> None:
    profile = load_profile("tiny-oversub")
    trial = trial_plan(profile, 1)[0]
    record = not_run(trial, profile, [ATTEMPT], error="gave up after 1 attempts")
    assert record.to_json() == {
        "index": trial.index,
        "variant": trial.variant.name,
        "repeat": 1,
        "status": "failed",
        "name": trial.name,
        "memory_limit": profile.limits.memory,
        "model_device": None,
        "exit_code": None,
        "oom_killed": False,
        "error": "gave up after 1 attempts",
        "engine_backend": None,
        "unscheduled": True,
        "attempts": [
            {
                "node_id": "node-a",
                "started_utc": "2026-01-01T00:00:00.000Z",
                "ended_utc": "2026-01-01T00:00:01.000Z",
                "error": "node lost: gone",
            }
        ],
    }


def test_a_trial_interrupted_on_its_node_names_the_node(tmp_path: Path) -> None:
    profile = load_profile("tiny-oversub")
    trial = trial_plan(profile, 1)[1]
    node = {"node_id": "node-a", "hostname": "h"}
    record = not_run(trial, profile, [ATTEMPT], node=node)
    written = RayExecutor("127.0.0.1:6379", "cpu", "0" * 64, [], [])._record_only(tmp_path, record)
    on_disk = json.loads((tmp_path / "trials" / trial.name / "trial.json").read_text())
    assert on_disk == written == record.to_json()
    assert on_disk["status"] == "interrupted" and on_disk["interrupted"] is True and on_disk["node"] == node
    assert "unscheduled" not in on_disk and "error" not in on_disk
    assert TrialRecord.from_json(on_disk, "trial.json") == record


NODES = [
    {"node_id": "a" * 56, "hostname": "box", "boot_id": "boot-1"},
    {"node_id": "b" * 56, "hostname": "box", "boot_id": "boot-1"},
    {"node_id": "c" * 56, "hostname": "other", "boot_id": "boot-2"},
]


def executor(isolated: bool = False) -> RayExecutor:
    return RayExecutor("127.0.0.1:6379", "cpu", "0" * 64, NODES, [], isolated=isolated)


def running_on(*nodes: str) -> dict[Any, Any]:
    trial = trial_plan(load_profile("tiny-oversub"), 1)[0]
    return {index: (trial, node, "2026-01-01T00:00:00.000Z") for index, node in enumerate(nodes)}


def test_two_nodes_of_one_host_never_run_trials_at_once() -> None:
    a, b, c = (n["node_id"] for n in NODES)
    ray = executor()
    assert ray._next_node([a, b, c], running_on()) == a
    assert ray._next_node([b, c], running_on(a)) == c  # b shares a's page cache
    assert ray._next_node([b], running_on(a, c)) is None
    assert ray._next_node([b], running_on(c)) == b
    assert ray.describe()["isolated_nodes"] is False


def test_nodes_said_to_be_isolated_run_at_once() -> None:
    a, b, _ = (n["node_id"] for n in NODES)
    ray = executor(isolated=True)
    assert ray._next_node([b], running_on(a)) == b
    assert ray.describe()["isolated_nodes"] is True


def test_a_node_without_boot_id_is_known_by_its_host_name() -> None:
    assert host_of({"hostname": "box"}) == "hostname:box"
    assert host_of(NODES[0]) == "boot-1"


@pytest.mark.parametrize(("value", "isolated"), [("", False), ("0", False), ("1", True)])
def test_the_isolation_switch(monkeypatch: pytest.MonkeyPatch, value: str, isolated: bool) -> None:
    monkeypatch.setenv(ISOLATED_NODES_ENV, value)
    assert isolated_nodes() is isolated


def test_the_isolation_switch_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISOLATED_NODES_ENV, "yes")
    with pytest.raises(ConfigError, match=r"^APPLIANCE_CLUSTER_ISOLATED_NODES must be 0 or 1, got 'yes'$"):
        isolated_nodes()
