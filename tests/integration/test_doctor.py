import json

import pytest

from appliance.core.checks import Status
from tests.conftest import run_cli


@pytest.mark.docker
def test_doctor_json_reports_the_engine_and_cpu_target(docker_client) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("doctor", "--json")
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert Status(checks["docker engine"]["status"]) is Status.PASS
    assert report["facts"]["docker_version"] == docker_client.version()["Version"]
    assert report["facts"]["cgroup_version"] in {"1", "2"}
    assert report["target"] == "cpu"  # no GPU on CI machines
    assert result.returncode == 0 and report["ok"] is True
    for check in report["checks"]:
        assert Status(check["status"]) in set(Status)
        if Status(check["status"]) is not Status.PASS:
            assert check["fix"], f"{check['name']} is not passing and gives no fix"


def test_doctor_text_is_one_line_per_check() -> None:
    result = run_cli("doctor")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    marks = {status.value.upper() for status in Status}
    assert lines and all(line.split()[0] in marks for line in lines)
    assert any("target" in line for line in lines)
