"""timing.json as `TimingRecord`: the engine's records in the sealed fixture (two trials and the
disk probe) read and write back unchanged, a cache replay's shape reads, a key the class lacks is
refused by name, and the tolerant reader gives None for what is no engine record."""

import json
from pathlib import Path

import jsonschema
import pytest

from appliance.core.errors import ConfigError
from appliance.core.validation import schema_problems
from appliance.runs.run_dir import RunDir
from appliance.runs.timing import (
    ROUTER_FUSION,
    EngineIo,
    IoCounters,
    KernelPath,
    ProbeMeasurement,
    TimingRecord,
    load_timing,
    read_timing,
    timing_of,
)
from appliance.runs.trial import engine_backend
from tests.conftest import REPO

OLD_BUNDLE = REPO / "tests" / "fixtures" / "sealed-main-daca34b" / "bundle"
OLD_TIMINGS = sorted(OLD_BUNDLE.glob("*/*/timing.json"))


@pytest.mark.parametrize("path", OLD_TIMINGS, ids=lambda p: p.parent.name)
def test_a_timing_the_engine_wrote_reads_and_writes_back_unchanged(path: Path) -> None:
    data = json.loads(path.read_text())
    record = load_timing(path)
    assert record.to_json() == data
    assert record.tool == "llama-moe-trace"
    jsonschema.Draft7Validator(TimingRecord.json_schema()).validate(data)


def test_a_trials_timing_is_typed() -> None:
    record = load_timing(OLD_TIMINGS[1])
    assert record.backend == "CPU" and record.n_decode_tokens == 64 and record.expert_cache is None
    assert record.io is not None and record.io.decode_end == IoCounters(27332685824, 97900, 2878, 73521)
    assert record.measurements is None
    assert engine_backend(OLD_TIMINGS[1]) == "CPU"


def test_the_disk_probe_is_read_through_the_record() -> None:
    probe = RunDir(OLD_BUNDLE).read_probe()
    assert probe is not None and probe.probe == "disk" and probe.file_bytes == 417356704
    assert probe.measurements is not None and len(probe.measurements) == 4
    assert probe.measurements[0] == ProbeMeasurement(1622016, 1, 103809024, 0.237810055, 64, 103809024)
    assert probe.decode_s is None


def test_a_cache_replays_shape_reads() -> None:
    data = {
        "tool": "llama-moe-trace",
        "replay": "trace.moetrace",
        "events": 12,
        "requests": 48,
        "expert_cache": {"policy": "lru", "capacity": 8},
        "hit_flags": "0101",
    }
    record = TimingRecord.from_json(data, "timing.json")
    assert record.to_json() == data and record.requests == 48 and record.hit_flags == "0101"


def test_a_key_the_class_does_not_know_is_refused_and_the_tolerant_reader_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "timing.json"
    path.write_text(json.dumps({"decode_tokens_per_s": 2.0, "decode_tokens": 4}))  # a command's own
    with pytest.raises(
        ConfigError, match=rf"^{path}: unknown key 'decode_tokens' \(a TimingRecord has tool, "
    ):
        load_timing(path)
    assert read_timing(path) is None and engine_backend(path) is None
    assert read_timing(tmp_path / "missing.json") is None
    path.write_text(json.dumps({"io": {"load_end": {"read_bytes": "x"}}}))
    with pytest.raises(ConfigError, match=r"io: load_end: read_bytes: must be an integer, got str 'x'$"):
        load_timing(path)


def test_the_schema_is_derived_from_the_class() -> None:
    schema = TimingRecord.json_schema()
    assert schema_problems(schema) == []
    assert schema["required"] == [] and schema["additionalProperties"] is False
    assert schema["properties"]["io"] == {**EngineIo.json_schema(top=False), "type": ["object", "null"]}


def test_a_loaded_trials_timing_reads_as_a_record_and_a_commands_own_as_none() -> None:
    trial = RunDir(OLD_BUNDLE).trial("001-99.5MiB-baseline-r1").load()
    timing = timing_of(trial)
    assert timing == load_timing(OLD_TIMINGS[1]) and timing.decode_s is not None
    assert timing_of({}) == TimingRecord() == timing_of({"timing": {}})
    assert timing_of({"timing": {"decode_tokens": 4}}) == TimingRecord()  # not the engine's record


def test_the_kernel_path_reads_typed_and_an_unknown_key_in_it_is_refused() -> None:
    """patch 0001's `kernel_path`: what the eval callback's cuts did to the kernels (a device run
    traced on the stand-in, as the e2e test records it)."""
    cut = {
        "eval_callback": True,
        "graph_cuts": 20,
        "graph_cuts_per_decode_token": 4,
        "cut_buffer": "RPC0[127.0.0.1:50991]",
        "router_fusion": "server-backend",
    }
    record = TimingRecord.from_json({"tool": "llama-moe-trace", "kernel_path": cut}, "t")
    assert record.kernel_path == KernelPath(True, 20, 4, "RPC0[127.0.0.1:50991]", "server-backend")
    assert record.to_json()["kernel_path"] == cut
    assert set(ROUTER_FUSION) == {"not-cut", "prevented", "server-backend", "no-fused-kernel"}
    with pytest.raises(ConfigError, match=r"^t: kernel_path: unknown key 'fused'"):
        TimingRecord.from_json({"kernel_path": {**cut, "fused": False}}, "t")
