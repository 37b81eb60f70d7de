"""Runs and sweeps through `--cluster` on a local Ray cluster of three nodes, on loopback.

The cluster lives in a network namespace with only `lo` (tests/ray_cluster.py): a head and a
worker with the real cpu engine image, and a third node told to use an image whose inputs
digest label differs, which every run must refuse. The tests run in file order: the sweep runs
on both nodes before the node-loss test kills the worker's raylet.
"""

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from appliance.attest.dsse import KeyPair, init_keys
from appliance.attest.verify import Verdict, verify_bundle
from appliance.core.paths import cache_dir
from appliance.images import labels
from appliance.images.labels import INPUTS_DIGEST
from appliance.runs.profile import load_profile
from appliance.workflows.run import ensure_synth_model
from tests.conftest import REPO, unavailable
from tests.ray_cluster import ADDRESS, LoopbackCluster, namespaces_available

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]
PROFILE = "tiny-oversub"
OTHER_IMAGE = "moe-expert-cache-clustertest:other-inputs"


@pytest.fixture(scope="module")
def models() -> Path:
    directory = cache_dir() / "models" / "demo"
    ensure_synth_model(load_profile(PROFILE), directory, Console(file=io.StringIO()))
    return directory


@pytest.fixture(scope="module")
def other_image(docker_client, engine_image_cpu: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The engine image with another inputs digest label: what a stale node would hold."""
    dockerfile = f"FROM {engine_image_cpu}\nLABEL {INPUTS_DIGEST}={'0' * 64}\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=OTHER_IMAGE, rm=True)
    yield OTHER_IMAGE
    docker_client.images.remove(OTHER_IMAGE, force=True)


@pytest.fixture(scope="module")
def cluster(engine_image_cpu: str, other_image: str) -> Iterator[dict[str, Any]]:
    why = namespaces_available()
    if why is not None:
        unavailable(why)
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("ray is not installed (pip install .[cluster])")
    nodes = LoopbackCluster()
    try:
        nodes.start_namespace()
        nodes.join(head=True)
        nodes.join()
        nodes.join(images={"cpu": other_image})
        reports = nodes.status()
        by_role = {
            "head": next(r for r in reports if r["head"]),
            "worker": next(r for r in reports if not r["head"] and r["images"]["cpu"]["tag"] != other_image),
            "stale": next(r for r in reports if r["images"]["cpu"]["tag"] == other_image),
        }
        yield {"nodes": nodes, "reports": reports, **by_role}
    finally:
        nodes.stop()


KEYS = init_keys(Path(tempfile.mkdtemp(prefix="cluster-test-keys-")))


def signing(keys: KeyPair = KEYS) -> list[str]:
    """Bundles are signed with a key made for these tests and verified against it alone."""
    return ["--key", str(keys.private)]


def verified(run: Path) -> bool:
    return verify_bundle(run, KEYS.public).verdict is Verdict.VERIFIED


def run_args(models: Path, out: Path, *extra: str) -> list[str]:
    return ["run", PROFILE, "--models", str(models), "--repeats", "1", "--out", str(out), *signing(), *extra]


def trials(run: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(run.glob("trials/*/trial.json"))}


def tree_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def fields(results: dict[str, Any]) -> dict[str, Any]:
    """results.json's field names: top level, per variant, and the ratio pairs."""
    return {
        "top": sorted(results),
        "variants": {name: sorted(v) for name, v in results["variants"].items()},
        "ratios": [(r["numerator"], r["denominator"]) for r in results["ratios"]],
    }


def test_cluster_is_on_loopback_and_lists_its_nodes(cluster: dict[str, Any]) -> None:
    assert cluster["nodes"].interfaces() == ["lo"]
    reports = cluster["reports"]
    assert len(reports) == 3
    assert {r["address"] for r in reports} == {"127.0.0.1"}
    assert all(r["targets"] == ["cpu"] for r in reports)
    assert (
        cluster["head"]["images"]["cpu"]["inputs_digest"]
        == cluster["worker"]["images"]["cpu"]["inputs_digest"]
        != cluster["stale"]["images"]["cpu"]["inputs_digest"]
    )


def test_run_spreads_over_two_nodes_refuses_the_stale_one_and_verifies(
    cluster: dict[str, Any], models: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    result = cluster["nodes"].appliance(*run_args(models, tmp_path / "cluster", "--cluster", ADDRESS))
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    print(f"cluster run of {PROFILE} --repeats 1 on two nodes: {seconds:.1f} s")
    stale = cluster["stale"]["node_id"]
    assert f"refused: node {stale[:12]}" in result.stdout
    assert "carries inputs digest 000000000000" in result.stdout

    run = tmp_path / "cluster"
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "complete"
    executor = record["executor"]
    assert executor["kind"] == "ray" and executor["resource"] == "appliance-cpu"
    assert {n["node_id"] for n in executor["nodes"]} == {
        cluster["head"]["node_id"],
        cluster["worker"]["node_id"],
    }
    assert len(executor["refused"]) == 1 and stale[:12] in executor["refused"][0]
    recorded = trials(run)
    assert len(recorded) == 3
    nodes_used = {name: t["node"]["node_id"] for name, t in recorded.items()}
    assert len(set(nodes_used.values())) == 2 and stale not in nodes_used.values()
    assert executor["trial_nodes"] == nodes_used
    for trial in recorded.values():
        assert trial["status"] == "ok", trial
        assert [a["node_id"] for a in trial["attempts"]] == [trial["node"]["node_id"]]
        assert trial["node"]["image"]["tag"] != OTHER_IMAGE
        assert trial["node"]["host"]["kernel"] == os.uname().release
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance["run"]["executor"]["trial_nodes"] == nodes_used
    assert verified(run)
    paging = json.loads((run / "analysis" / "paging.json").read_text())["lru_prediction"]
    assert [row["contamination"]["comparable"] for row in paging] == [True] * len(paging), paging

    local = cluster["nodes"].appliance(*run_args(models, tmp_path / "local"))
    assert local.returncode == 0, local.stdout[-4000:] + local.stderr[-4000:]
    assert json.loads((tmp_path / "local" / "run.json").read_text())["executor"] == {"kind": "local"}
    assert fields(json.loads((run / "results.json").read_text())) == fields(
        json.loads((tmp_path / "local" / "results.json").read_text())
    )


def test_an_interrupted_sweep_resumes_with_only_its_missing_trials(
    cluster: dict[str, Any], models: Path, tmp_path: Path, docker_client
) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "sweep"
    args = [
        "sweep",
        PROFILE,
        "--models",
        str(models),
        "--memory",
        "0.5,1.2",
        "--repeats",
        "1",
        "--out",
        str(run),
        *signing(),
        "--cluster",
        ADDRESS,
    ]
    driver = cluster["nodes"].driver(*args)
    assert driver.stdout is not None
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(driver.stdout or []), daemon=True)
    reader.start()
    # A state, not a moment: Ctrl-C once one trial is recorded ok and another's container is
    # seen running (this run's label, state running), never on a guess about timing.
    interrupted_in = None
    deadline = time.monotonic() + 900
    while interrupted_in is None and driver.poll() is None and time.monotonic() < deadline:
        if any(": ok exit 0" in s for s in list(seen)) and (run / "run.json").is_file():
            run_id = json.loads((run / "run.json").read_text())["run_id"]
            for container in docker_client.containers.list(filters={"label": f"{labels.RUN}={run_id}"}):
                if container.status == "running":
                    interrupted_in = container.labels[labels.RUN_TRIAL]
                    driver.send_signal(signal.SIGINT)
                    break
        time.sleep(0.1)
    if interrupted_in is None:
        driver.kill()
    code = driver.wait(timeout=600)
    reader.join(timeout=60)
    output = "".join(seen)
    assert interrupted_in is not None, "no trial container seen running after an ok trial\n" + output[-4000:]
    assert code == 130, output[-4000:]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "incomplete"
    assert trials(run)[interrupted_in]["status"] == "interrupted"
    sealed = json.loads((run / "manifest.json").read_text())
    envelope_sha = hashlib.sha256((run / "attestation.dsse.json").read_bytes()).hexdigest()
    assert (
        docker_client.containers.list(all=True, filters={"label": f"{labels.RUN}={record['run_id']}"}) == []
    )
    planned = json.loads((run / "inputs" / "schedule.json").read_text())["trials"]
    assert len(planned) == 6  # 2 limits x 3 variants
    done = {name for name, t in trials(run).items() if t["status"] == "ok"}
    assert 1 <= len(done) < 6, output[-4000:]
    assert any(t["status"] == "interrupted" for t in trials(run).values())
    kept = {name: tree_digest(run / "trials" / name) for name in done}

    # a recorded trial edited after the seal: resume refuses in one line and changes nothing
    timing = run / "trials" / sorted(done)[0] / "timing.json"
    genuine = timing.read_bytes()
    timing.write_bytes(genuine + b" ")  # still JSON, another digest
    edited = tree_digest(run)
    refused = cluster["nodes"].appliance(*args, "--resume")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: cannot resume {run}: its seal does not verify as an incomplete run (verdict tampered"
        )
    ), refused.stderr[-2000:]
    assert tree_digest(run) == edited and "starting container" not in refused.stdout
    timing.write_bytes(genuine)

    resumed = cluster["nodes"].appliance(*args, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert f"{len(done)} of 6 trials recorded, {6 - len(done)} to run" in resumed.stdout
    assert "disk probe: evicting model" in output
    assert "disk probe: evicting model" not in resumed.stdout  # recorded by the first start
    started = {
        line.split()[1]
        for line in resumed.stdout.splitlines()
        if line.startswith("trial ") and "starting container" in line
    }
    assert started == set(planned) - done
    assert {name: tree_digest(run / "trials" / name) for name in done} == kept
    assert len(trials(run)) == 6 and all(t["status"] == "ok" for t in trials(run).values())
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "complete" and record["executor"]["kind"] == "ray"
    assert len({t["node"]["node_id"] for t in trials(run).values()}) == 2, trials(run)
    sweep = json.loads((run / "results.json").read_text())["sweep"]
    assert verified(run)
    resumed_from = json.loads((run / "provenance.json").read_text())["run"]["resumed_from"]
    assert resumed_from == [
        {
            "bundle_digest": sealed["bundle_digest"],
            "attestation_sha256": envelope_sha,
            "signer": KEYS.keyid,
            "carried_over": sorted(done),
        }
    ]
    # one trial at a time on this one host: no trial read fewer bytes than Belady allows
    assert sweep["not_comparable"] == []
    checked = [r for r in sweep["trials"] if (r.get("contamination") or {}).get("checked")]
    assert len(checked) == 6, sweep["trials"]
    assert all(r["contamination"]["comparable"] for r in checked)
    assert record["executor"]["isolated_nodes"] is False


def running_container(docker_client: Any, trial: str, timeout_s: float = 120.0) -> Any:
    """The trial's container once Docker says it runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for container in docker_client.containers.list(filters={"label": f"{labels.RUN_TRIAL}={trial}"}):
            if container.status == "running":
                return container
        time.sleep(0.05)
    raise AssertionError(f"trial {trial}'s container never ran")


def test_a_trial_whose_node_is_lost_runs_again_elsewhere(
    cluster: dict[str, Any], docker_client: Any, models: Path, tmp_path: Path
) -> None:
    worker = cluster["worker"]["node_id"]
    driver = cluster["nodes"].driver(*run_args(models, tmp_path / "run", "--cluster", ADDRESS))
    assert driver.stdout is not None
    seen, victim = [], None
    for line in driver.stdout:
        seen.append(line)
        if f"on node {worker[:8]}" in line and "starting container" in line:
            victim = line.split()[1]
            # the node goes while its trial's container runs, and the container with it, as
            # on a host that went away
            container = running_container(docker_client, victim)
            assert cluster["nodes"].lose_node(worker, partial(container.remove, force=True))
            break
    output = "".join(seen) + driver.stdout.read()
    assert driver.wait(timeout=1800) == 0, output[-4000:]
    assert victim is not None, output[-4000:]

    recorded = trials(tmp_path / "run")
    assert len(recorded) == 3 and all(t["status"] == "ok" for t in recorded.values())
    attempts = recorded[victim]["attempts"]
    assert len(attempts) == 2, attempts
    assert attempts[0]["node_id"] == worker and attempts[0]["error"].startswith("node lost")
    assert attempts[1]["node_id"] == cluster["head"]["node_id"] == recorded[victim]["node"]["node_id"]
    assert attempts[1]["status"] == "ok"
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "complete" and run["executor"]["lost"] == [worker]
    assert verified(tmp_path / "run")


def test_an_unreachable_cluster_is_one_line_before_anything_is_written(
    engine_image_cpu: str, models: Path, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "appliance", *run_args(models, tmp_path / "run", "--cluster", "127.0.0.1:9")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip().splitlines()[-1].startswith("error: cannot reach a Ray cluster at 127.0.0.1:9")
    )
    assert not (tmp_path / "run").exists()
