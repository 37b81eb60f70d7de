"""llama-moe-trace's placement options (patch 0001) and the placement the engine records.

The recorded model bytes are checked against the GGUF's tensor bytes computed here with gguf's
own reader, independently of the tool (which reads llama.cpp's tensor map).
"""

import re
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import quants

from tests.e2e.conftest import run_tracer
from tests.models import tiny_model

PROMPT = "The cat sat on the mat. The dog sat on the log."
ARGS = ("-n", "8", "--ignore-eos")
# the routed expert tensors as llama.cpp's common/common.h names them (LLM_FFN_EXPS_REGEX)
EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")

pytestmark = pytest.mark.engine


def tensor_bytes(model: Path) -> tuple[int, int, int]:
    """(all tensor bytes, routed expert tensor bytes, tensor count) by gguf's reader."""
    tensors = gguf.GGUFReader(model).tensors
    total = sum(int(t.n_bytes) for t in tensors)
    experts = sum(int(t.n_bytes) for t in tensors if EXPERTS.search(t.name))
    return total, experts, len(tensors)


def q4_0_experts(source: Path, out: Path) -> Path:
    """A copy of `source` whose expert tensors are Q4_0, a type llama.cpp repacks on x86 (AVX2)."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        if EXPERTS.search(t.name):
            dense = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            writer.add_tensor(
                t.name,
                quants.quantize(dense, gguf.GGMLQuantizationType.Q4_0),
                raw_dtype=gguf.GGMLQuantizationType.Q4_0,
            )
        else:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_no_repack_puts_every_model_byte_in_cpu_mapped(engine_bin: Path, tmp_path: Path) -> None:
    model = tiny_model("qwen3moe")
    run = run_tracer(engine_bin, model, tmp_path, *ARGS, "--no-repack", prompt=PROMPT)
    placement = run.timings["placement"]
    total, experts, count = tensor_bytes(model)
    assert placement["source"] == "engine"
    assert placement["model_bytes"] == total and placement["model_tensors"] == count
    assert placement["model"] == {
        "CPU_Mapped": {"bytes": total, "expert_bytes": experts, "tensors": count, "device": "CPU"}
    }
    assert placement["layers_offloaded"] == 0 and placement["overrides"] == []
    # llama.cpp's own lines: the mapped buffer holds the tensors (plus alignment padding), the KV
    # cache and compute buffers are on the CPU
    mapped = placement["model_buffers_log"]["CPU_Mapped"]
    assert total - placement["log_precision_bytes"] <= mapped["bytes"] <= model.stat().st_size
    assert placement["kv_cache"]["CPU"]["bytes"] > 0 and placement["kv_cache"]["CPU"]["device"] == "CPU"
    assert placement["compute"]["CPU"]["bytes"] > 0


def test_repacking_puts_the_repacked_part_in_cpu_repack(engine_bin: Path, tmp_path: Path) -> None:
    model = q4_0_experts(tiny_model("qwen3moe"), tmp_path / "q4_0.gguf")
    total, experts, count = tensor_bytes(model)
    repacked = run_tracer(engine_bin, model, tmp_path / "repack", *ARGS, prompt=PROMPT).timings["placement"]
    mapped = run_tracer(engine_bin, model, tmp_path / "mapped", *ARGS, "--no-repack", prompt=PROMPT)
    parts = repacked["model"]
    assert set(parts) == {"CPU_Mapped", "CPU_REPACK"}
    assert parts["CPU_REPACK"]["bytes"] == parts["CPU_REPACK"]["expert_bytes"] == experts  # every Q4_0 expert
    assert parts["CPU_Mapped"]["bytes"] == total - experts and parts["CPU_Mapped"]["expert_bytes"] == 0
    assert parts["CPU_REPACK"]["device"] == parts["CPU_Mapped"]["device"] == "CPU"
    assert repacked["model_bytes"] == total and repacked["model_tensors"] == count
    assert mapped.timings["placement"]["model"] == {
        "CPU_Mapped": {"bytes": total, "expert_bytes": experts, "tensors": count, "device": "CPU"}
    }


@pytest.mark.parametrize(
    "placement", [("--cpu-moe",), ("--n-cpu-moe", "2"), ("-ot", r"blk\.[01]\.ffn_.*_exps=CPU")]
)
def test_cpu_placement_on_the_cpu_changes_no_trace_or_text(
    engine_bin: Path, tmp_path: Path, placement: tuple[str, ...]
) -> None:
    model = tiny_model("qwen3moe")
    plain = run_tracer(engine_bin, model, tmp_path / "plain", *ARGS, "--no-repack", prompt=PROMPT)
    placed = run_tracer(
        engine_bin, model, tmp_path / "placed", *ARGS, "--no-repack", *placement, prompt=PROMPT
    )
    assert placed.trace.read_bytes() == plain.trace.read_bytes()
    assert placed.text == plain.text and placed.text
    overrides = placed.timings["placement"]["overrides"]
    expected = {
        "--cpu-moe": [r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"],
        "--n-cpu-moe": [rf"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps" for i in range(2)],
        "-ot": [r"blk\.[01]\.ffn_.*_exps"],
    }[placement[0]]
    assert overrides == [{"pattern": p, "buffer_type": "CPU"} for p in expected]
    assert placed.timings["placement"]["model"] == plain.timings["placement"]["model"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--n-cpu-moe", "-1"), "--n-cpu-moe must be >= 0 (got -1)"),
        (
            ("-ot", "ffn_up_exps"),
            "override 'ffn_up_exps' is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')",
        ),
        (("-ot", "=CPU"), "override '=CPU' is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')"),
        (("-ot", "exps=CPU,"), "override '' is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')"),
        (("-ot", "blk[=CPU"), "override pattern 'blk[' is not a valid regular expression: "),
        (("-ot", "exps=CUDA0"), "unknown buffer type 'CUDA0' in an override (this build has: CPU)"),
    ],
)
def test_bad_placement_exits_with_one_line_and_no_trace(
    engine_bin: Path, tmp_path: Path, args: tuple[str, ...], reason: str
) -> None:
    run = run_tracer(engine_bin, tiny_model("qwen3moe"), tmp_path, *ARGS, *args, prompt=PROMPT, check=False)
    lines = run.result.stderr.decode().strip().splitlines()
    assert run.result.returncode == 1
    assert len(lines) == 1 and lines[0].startswith(f"llama-moe-trace: error: {reason}")
    assert not run.trace.exists() and not run.timings_path.exists()


def test_placement_help_names_the_options(engine_bin: Path) -> None:
    result = subprocess.run([str(engine_bin / "llama-moe-trace"), "--help"], capture_output=True, timeout=60)
    usage = result.stderr.decode()
    for option in ("-ot, --override-tensor PATTERN=TYPE", "-cmoe, --cpu-moe", "-ncmoe, --n-cpu-moe N"):
        assert option in usage


def test_the_planner_beside_the_engine_on_the_cpu(engine_bin: Path, tmp_path: Path) -> None:
    """results.json placement from a real engine record: on the CPU the planner's host bytes
    are the model's tensor bytes, which the engine placed exactly."""
    from appliance.analysis.placement import trial_placement
    from appliance.planner.accounting import account_file

    model = tiny_model("qwen3moe")
    run = run_tracer(engine_bin, model, tmp_path, *ARGS, "--no-repack", prompt=PROMPT)
    trial = {"dir": "001-baseline-r1", "variant": "baseline", "timing": run.timings, "cgroup": {}}
    row = trial_placement(trial, account_file(model), 1 << 30, None)
    assert row is not None
    total, _, _ = tensor_bytes(model)
    assert row["engine_model_bytes"] == {"CPU": total} and row["engine_buffers"] == {"CPU_Mapped": total}
    assert row["planner_model_bytes"] == row["measured_model_bytes"] == {"CPU": total}
    assert row["error_pct"] == {"model_cpu": 0.0, "peak": None} and row["under"] == []
