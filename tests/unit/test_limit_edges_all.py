"""Every input bound of the package at its edge: the limit itself is accepted, one past it is
refused with the reader's exact one line. Each limit is read from its one home (imported, or
looked up on its module), so moving it without moving the refusal fails here.

Byte budgets of many megabytes and deadlines of seconds are made small first
(`monkeypatch.setattr` on the module constant, which the code reads at call time) and the
edge of that small value is tested, so every test here stays well under a second; each such
test says so. `tests/unit/test_limit_census.py` keeps a table of which test pins which limit.
"""

import inspect
import json
import socket
import struct
import sys
import time
from contextlib import closing
from pathlib import Path

import click
import pytest

from appliance.analysis import html_report
from appliance.attest import dsse, trust
from appliance.cli import options
from appliance.cli import trace as trace_cli
from appliance.cluster import connect, join
from appliance.core import limits
from appliance.core.errors import ApplianceError, ConfigError, IntegrityError
from appliance.core.strict_load import MAX_DEPTH
from appliance.images import archive
from appliance.models import gguf_header, shapes
from appliance.planner import accounting, remote
from appliance.planner.remote import MAX_REDIRECTS, HttpRangeSource
from appliance.runs import memory_points, profile
from appliance.runs.run_dir import RunDir
from appliance.trace import format as trace_format
from appliance.trace import interchange, lcs_replay
from appliance.trace.synth import TraceSynthSpec, synth_trace

# --- byte budgets of the file readers ---------------------------------------------------------


def _pad_to(path: Path, size: int) -> Path:
    """path's bytes followed by spaces (JSON whitespace) to exactly size bytes."""
    data = path.read_bytes()
    assert len(data) <= size
    path.write_bytes(data + b" " * (size - len(data)))
    return path


def test_public_key_file_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    pair = dsse.init_keys(tmp_path / "keys")
    assert dsse.load_public_key(_pad_to(pair.public, dsse.MAX_KEY_FILE_BYTES)).keyid == pair.keyid
    _pad_to(pair.public, dsse.MAX_KEY_FILE_BYTES + 1)
    with pytest.raises(
        ConfigError,
        match=rf"^{pair.public}: larger than {dsse.MAX_KEY_FILE_BYTES} bytes, the most this reader",
    ):
        dsse.load_public_key(pair.public)


def _payload_envelope(size: int) -> dsse.ParsedEnvelope:
    statement = json.dumps({"_type": dsse.STATEMENT_TYPE, "subject": [], "predicate": {}}).encode()
    return dsse.ParsedEnvelope(statement + b" " * (size - len(statement)), dsse.PAYLOAD_TYPE, [])


def test_attestation_payload_budget_at_the_limit_and_one_past(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_PAYLOAD_BYTES (64 MiB) made 4 KiB here; the edge is the same comparison."""
    monkeypatch.setattr(dsse, "MAX_PAYLOAD_BYTES", 4096)
    assert dsse.read_statement(_payload_envelope(dsse.MAX_PAYLOAD_BYTES))["_type"] == dsse.STATEMENT_TYPE
    with pytest.raises(IntegrityError, match=r"^attestation payload: larger than 4096 bytes, the most"):
        dsse.read_statement(_payload_envelope(dsse.MAX_PAYLOAD_BYTES + 1))


def test_image_sidecar_budget_at_the_limit_and_one_past(tmp_path: Path) -> None:
    signer = dsse.load_signer(dsse.init_keys(tmp_path / "keys").private)
    record = {
        "schema": archive.SCHEMA,
        "target": "cpu",
        "tag": "appliance-engine:cpu",
        "image_id": "sha256:" + "1" * 64,
        "labels": {},
        "lock_digest": "2" * 64,
        "archive": {"sha256": "3" * 64, "bytes": 10},
        "exported_by": signer.public_key.keyid,
    }
    path = tmp_path / "engine.tar.sidecar.json"
    path.write_text(json.dumps(archive.sign_sidecar(record, signer)))
    assert archive.read_sidecar(_pad_to(path, archive.MAX_SIDECAR_BYTES)).record() == record
    _pad_to(path, archive.MAX_SIDECAR_BYTES + 1)
    with pytest.raises(
        ConfigError, match=rf"^{path}: larger than {archive.MAX_SIDECAR_BYTES} bytes, the most"
    ):
        archive.read_sidecar(path)


def test_plot_budget_at_the_limit_and_one_past(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_PLOT_BYTES (8 MiB) made 4 KiB here: a plot at it is inlined, one byte more is left out."""
    monkeypatch.setattr(html_report, "MAX_PLOT_BYTES", 4096)
    layout = RunDir(tmp_path)
    layout.plots.mkdir(parents=True)
    plot = layout.plots / "latency.png"
    plot.write_bytes(html_report.PNG_SIGNATURE + bytes(html_report.MAX_PLOT_BYTES - 8))
    assert "<img src=" in html_report._plots(layout) and "left out" not in html_report._plots(layout)
    plot.write_bytes(html_report.PNG_SIGNATURE + bytes(html_report.MAX_PLOT_BYTES - 7))
    assert f"latency.png left out: {plot}: larger than 4096 bytes" in html_report._plots(layout)
    assert "<img" not in html_report._plots(layout)


def test_trace_import_budget_at_the_limit_and_one_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAX_IMPORT_BYTES (1 GiB) made 4 KiB here: a vLLM file of exactly that many bytes (JSON
    padded with spaces) is imported, one byte more is refused before it is parsed."""
    monkeypatch.setattr(interchange, "MAX_IMPORT_BYTES", 4096)
    model = {"n_layers": 2, "n_experts": 8, "n_expert_used": 2, "moe_layers": [0, 1]}
    request = {
        "prompt_token_ids": [1, 2],
        "routed_experts": [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[1, 2], [3, 4]]],
    }
    path = tmp_path / "routes.json"
    path.write_text(json.dumps([request]))
    _pad_to(path, interchange.MAX_IMPORT_BYTES)
    assert interchange.import_trace(path, "vllm", model).n_steps == 2  # the prompt, then one token
    _pad_to(path, interchange.MAX_IMPORT_BYTES + 1)
    with pytest.raises(ConfigError, match=rf"^{path}: larger than 4096 bytes, the most this reader accepts$"):
        interchange.import_trace(path, "vllm", model)


# --- the GGUF header reader -----------------------------------------------------------------


def _one_tensor_gguf(path: Path, dims: list[int], alignment: int | None = None) -> Path:
    """A GGUF v3 header of one tensor info (and general.alignment when given), no data."""

    def string(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    kv = b""
    if alignment is not None:
        kv = string(b"general.alignment") + struct.pack("<IQ", 10, alignment)  # type 10: u64
    info = string(b"t.weight") + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    info += struct.pack("<IQ", 0, 0)  # f32, offset 0
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, int(alignment is not None)) + kv + info)
    return path


def test_tensor_elements_at_the_limit_and_one_past(tmp_path: Path) -> None:
    path = _one_tensor_gguf(tmp_path / "edge.gguf", [gguf_header.MAX_DIM])
    assert gguf_header.read_header_file(path).tensors[0].shape == (gguf_header.MAX_DIM,)
    _one_tensor_gguf(path, [gguf_header.MAX_DIM + 1])
    with pytest.raises(
        ApplianceError,
        match=rf"^{path}: corrupt tensor info for 't.weight': shape \[{gguf_header.MAX_DIM + 1}\] holds "
        "more elements than ggml can address$",
    ):
        gguf_header.read_header_file(path)


def test_alignment_at_the_limit_and_one_past(tmp_path: Path) -> None:
    top = gguf_header.MAX_ALIGNMENT
    assert gguf_header.alignment_of({"general.alignment": top}, "m") == top
    with pytest.raises(
        ApplianceError,
        match=rf"^m: corrupt GGUF header: general.alignment is {top * 2}, not a positive power",
    ):
        gguf_header.alignment_of({"general.alignment": top * 2}, "m")  # the next power of two
    path = _one_tensor_gguf(tmp_path / "edge.gguf", [4], alignment=top)
    assert gguf_header.read_header_file(path).alignment == top


# --- trace headers ----------------------------------------------------------------------------


def _header(**fields: object) -> dict[str, object]:
    header = dict(synth_trace(TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=0, n_decode=4)).header)
    header.update(fields)
    return header


@pytest.mark.parametrize(
    ("key", "limit", "others"),
    [
        ("n_layers", "MAX_TRACE_LAYERS", {}),
        ("n_experts", "MAX_TRACE_EXPERTS", {}),
        ("n_expert_used", "MAX_EXPERT_USED", {"n_experts": 4096}),
    ],
)
def test_trace_header_counts_at_the_limit_and_one_past(key: str, limit: str, others: dict[str, int]) -> None:
    top = getattr(trace_format, limit)
    assert trace_format._check_header(_header(**others, **{key: top}), "t")[key] == top
    with pytest.raises(
        ConfigError,
        match=rf"^t: header {key}={top + 1} is outside 1..{top}; the file is corrupt or from a model",
    ):
        trace_format._check_header(_header(**others, **{key: top + 1}), "t")


def test_trace_objects_at_the_limit_and_one_past() -> None:
    top = trace_format.MAX_OBJECTS
    experts = 4096
    assert top % experts == 0
    layers = top // experts
    at = _header(n_layers=layers + 1, n_experts=experts, moe_layers=list(range(layers)))
    assert len(trace_format._check_header(at, "t")["moe_layers"]) * experts == top
    past = _header(n_layers=layers + 1, n_experts=experts, moe_layers=list(range(layers + 1)))
    with pytest.raises(
        ConfigError,
        match=rf"^t: {layers + 1} MoE layers x {experts} experts is over the {top} experts a replay can "
        "track$",
    ):
        trace_format._check_header(past, "t")


def test_trace_header_nesting_is_the_strict_loaders_depth() -> None:
    """One home for the depth limit: the trace reader's fast pre-check refuses exactly what
    the strict loader refuses."""
    assert trace_format.MAX_DEPTH is MAX_DEPTH


def test_trace_header_depth_at_the_limit_and_one_past() -> None:
    base = json.dumps(_header()).encode()[:-1]
    at = base + b', "x": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"  # the header is one level
    header, rows = trace_format.parse_trace(trace_format.encode_trace_bytes(at), "t")
    assert len(rows) == 0 and header["n_layers"] == 2
    past = base + b', "x": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    with pytest.raises(
        ConfigError, match=rf"^t: trace header nests deeper than {MAX_DEPTH} levels; the file is"
    ):
        trace_format.parse_trace(trace_format.encode_trace_bytes(past), "t")


def test_oracle_size_at_the_limit_and_one_past() -> None:
    trace = synth_trace(TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=0, n_decode=4))
    top = interchange.MAX_ORACLE_SIZE
    records = interchange.libcachesim_oracle(trace, dict.fromkeys(trace.moe_layers, top))
    assert len(records) and set(records["size"].tolist()) == {top}
    with pytest.raises(
        ConfigError,
        match=rf"^layer {trace.moe_layers[0]}: one expert is {top + 1} bytes, which libCacheSim's "
        "oracleGeneral",
    ):
        interchange.libcachesim_oracle(trace, dict.fromkeys(trace.moe_layers, top + 1))


@pytest.mark.parametrize("policy", sorted(lcs_replay.MIN_CAPACITY))
def test_libcachesim_capacity_at_its_floor_and_one_below(policy: str) -> None:
    low = lcs_replay.MIN_CAPACITY[policy]
    lcs_replay.check_capacities([policy], [low])
    with pytest.raises(
        ConfigError,
        match=rf"^libCacheSim's {policy} needs a capacity of at least {low} experts .*, got {low - 1}$",
    ):
        lcs_replay.check_capacities([policy], [low - 1])


def test_replay_capacity_at_the_limit_and_one_past() -> None:
    top = trace_cli.MAX_CAPACITY
    assert trace_cli._capacities((f"1,{top}",)) == [1, top]
    with pytest.raises(ConfigError, match=rf"^capacity must be from 1 to {top} experts, got {top + 1}$"):
        trace_cli._capacities((str(top + 1),))


# --- the command line's ranges ----------------------------------------------------------------


def _refused(kind: click.ParamType, value: int, message: str) -> None:
    with pytest.raises(click.BadParameter, match=message):
        kind.convert(value, None, None)


def test_counts_at_the_limit_and_one_past() -> None:
    top = options.MAX_COUNT
    for kind in (options.POSITIVE, options.NON_NEGATIVE):
        assert kind.convert(top, None, None) == top
    _refused(options.POSITIVE, top + 1, rf"^{top + 1} is not in the range 1<=x<={top}\.$")
    _refused(options.NON_NEGATIVE, top + 1, rf"^{top + 1} is not in the range 0<=x<={top}\.$")


def test_seed_and_repeats_at_the_limit_and_one_past() -> None:
    assert options.SEED.convert(limits.MAX_SEED, None, None) == limits.MAX_SEED
    _refused(
        options.SEED,
        limits.MAX_SEED + 1,
        rf"^{limits.MAX_SEED + 1} is not in the range 0<=x<={limits.MAX_SEED}\.$",
    )
    assert options.REPEATS.convert(limits.MAX_REPEATS, None, None) == limits.MAX_REPEATS
    _refused(
        options.REPEATS,
        limits.MAX_REPEATS + 1,
        rf"^{limits.MAX_REPEATS + 1} is not in the range 1<=x<={limits.MAX_REPEATS}\.$",
    )


def _max_attempts_type() -> click.ParamType:
    @options.trial_options("run")
    def command(**kwargs: object) -> None:
        pass

    return next(p for p in click.command()(command).params if p.name == "max_attempts").type


def test_max_attempts_at_the_limit_and_one_past() -> None:
    kind = _max_attempts_type()
    assert kind.convert(options.MAX_ATTEMPTS, None, None) == options.MAX_ATTEMPTS
    top = options.MAX_ATTEMPTS
    _refused(kind, top + 1, rf"^{top + 1} is not in the range 1<=x<={top}\.$")


# --- sizes in profiles and sweeps -------------------------------------------------------------


def test_memory_fraction_at_the_limit_and_one_past() -> None:
    top = memory_points.MAX_FRACTION
    assert memory_points.parse_memory_point(top).fraction == top
    past = top + 0.5
    with pytest.raises(
        ConfigError,
        match=rf"^memory {past}: a plain number is a fraction of the model file and must be above 0 "
        rf"and at most {top:g};",
    ):
        memory_points.parse_memory_point(past)


def test_profile_size_at_the_limit_and_one_past(tmp_path: Path) -> None:
    top = profile.MAX_SIZE
    assert profile._size({"memory": f"{top}B"}, "memory", tmp_path) == top
    with pytest.raises(
        ConfigError, match=rf"^{tmp_path}: /limits/memory: '{top + 1}B' is more than {top} bytes$"
    ):
        profile._size({"memory": f"{top + 1}B"}, "memory", tmp_path)


def test_profile_memory_at_the_engines_floor_and_one_below(tmp_path: Path) -> None:
    floor = profile.DOCKER_MIN_MEMORY
    raw = {"memory": f"{floor}B", "engine_min_memory": "1B"}
    assert profile._limits(raw, tmp_path).memory == floor
    with pytest.raises(
        ConfigError,
        match=rf"^{tmp_path}: /limits/memory: .* is impossible: the engine needs at least .* "
        rf"\({floor} bytes\) to start$",
    ):
        profile._limits({**raw, "memory": f"{floor - 1}B"}, tmp_path)


# --- model shapes: llama.cpp's limits, one home for the planner and the synthesizer ------------


def test_llama_cpp_limits_have_one_home() -> None:
    assert (
        accounting.MAX_MODEL_LAYERS is limits.MAX_MODEL_LAYERS
        and shapes.MAX_MODEL_LAYERS is limits.MAX_MODEL_LAYERS
    )
    assert (
        accounting.MAX_MODEL_EXPERTS is limits.MAX_MODEL_EXPERTS
        and shapes.MAX_MODEL_EXPERTS is limits.MAX_MODEL_EXPERTS
    )


@pytest.mark.parametrize(
    ("key", "limit"), [("block_count", "MAX_MODEL_LAYERS"), ("expert_count", "MAX_MODEL_EXPERTS")]
)
def test_the_planner_reads_llama_cpps_limits_at_the_edge_and_refuses_past(
    key: str, limit: str, tmp_path: Path
) -> None:
    from tests.unit.planner.test_accounting import BASE_KEYS, _header_only

    top = getattr(limits, limit)
    facts = accounting.account_file(
        _header_only(tmp_path / "at.gguf", "qwen3moe", {**BASE_KEYS, key: top}, 3)
    ).facts
    assert (facts.layers if key == "block_count" else facts.experts) == top
    past = _header_only(tmp_path / "past.gguf", "qwen3moe", {**BASE_KEYS, key: top + 1}, 3)
    with pytest.raises(
        ApplianceError, match=rf"qwen3moe.{key} is {top + 1}, not a whole number from 0 to {top}"
    ):
        accounting.account_file(past)


@pytest.mark.parametrize(
    ("field", "flag", "limit"),
    [("layers", "--layers", "MAX_MODEL_LAYERS"), ("experts", "--experts", "MAX_MODEL_EXPERTS")],
)
def test_the_synthesizer_takes_llama_cpps_limits_and_refuses_past(field: str, flag: str, limit: str) -> None:
    top = getattr(limits, limit)
    base = {"arch": "qwen3moe", "size_bytes": 8 << 20, "experts": 8, "used": 2, "layers": 2}
    shapes.check_spec(shapes.ModelSynthSpec(**{**base, field: top}))  # type: ignore[arg-type]
    with pytest.raises(ApplianceError, match=rf"^{flag} {top + 1} exceeds llama.cpp's limit of {top}$"):
        shapes.check_spec(shapes.ModelSynthSpec(**{**base, field: top + 1}))  # type: ignore[arg-type]


# --- addresses and deadlines --------------------------------------------------------------------


def test_port_at_the_limit_and_one_past() -> None:
    top = join.MAX_PORT
    assert join.parse_address(f"127.0.0.1:{top}", "--address") == ("127.0.0.1", top)
    with pytest.raises(ConfigError, match=rf"^--address: port '{top + 1}' is not a number from 1 to {top}$"):
        join.parse_address(f"127.0.0.1:{top + 1}", "--address")


def _backlogged_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A 127.0.0.1 port whose accept queue is full: the kernel drops further SYNs, so a
    connection attempt waits for its timeout (nothing outside this machine is asked)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    time.sleep(0.05)
    return listener, fillers


def test_cluster_reach_timeout_at_the_limit_and_past(monkeypatch: pytest.MonkeyPatch) -> None:
    """REACH_TIMEOUT_S (5 s) made 0.3 s here: a listening port answers well within it; one
    that never completes the handshake is refused once it has passed, not before."""
    monkeypatch.setattr(connect, "REACH_TIMEOUT_S", 0.3)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        connect.check_reachable(f"127.0.0.1:{listener.getsockname()[1]}")  # no error
    listener, fillers = _backlogged_listener()
    try:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(
            ApplianceError,
            match=rf"^cannot reach a Ray cluster at {address} \(timed out\): start its head "
            r"\(docs/cluster.md\) or",
        ):
            connect.check_reachable(address)
        assert (
            connect.REACH_TIMEOUT_S <= time.monotonic() - start < connect.REACH_TIMEOUT_S + 2.0
        )  # slack: load
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_head_probe_timeout_is_its_default_and_ends_a_silent_head() -> None:
    assert inspect.signature(join.check_head_answers).parameters["timeout_s"].default == join.HEAD_PROBE_S
    listener, fillers = _backlogged_listener()
    try:
        port = int(listener.getsockname()[1])
        start = time.monotonic()
        with pytest.raises(
            ApplianceError, match=rf"^no Ray head answers at 127.0.0.1:{port} \(no answer within 0.3 s\)"
        ):
            join.check_head_answers("127.0.0.1", port, timeout_s=0.3)
        assert 0.3 <= time.monotonic() - start < 2.3  # slack: a loaded machine
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_ray_start_deadline_is_its_default_and_a_start_within_it_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAY_START_DEADLINE_S (300 s) is the default; its edge is shown on 1 s: a start that
    ends in time returns its output (the one past it: test_join_address's stopped start)."""
    assert inspect.signature(join.run_ray_start).parameters["deadline_s"].default == join.RAY_START_DEADLINE_S
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    assert join.run_ray_start([sys.executable, "-c", "print('started')"], {}, deadline_s=5.0) == "started\n"
    with pytest.raises(
        ApplianceError, match=r"^ray start did not finish within 0.3 s and was stopped; its output"
    ):
        join.run_ray_start([sys.executable, "-c", "import time; time.sleep(30)"], {}, deadline_s=0.3)


# --- the remote GGUF reader's deadlines, rate, redirects and header budget ---------------------


def _remote(**kwargs: float) -> HttpRangeSource:
    return HttpRangeSource("http://127.0.0.1:9/model.gguf", **kwargs)


def test_remote_limits_default_to_their_homes() -> None:
    source = _remote()
    assert (source.deadline_s, source.total_deadline_s, source.min_rate, source.rate_grace_s) == (
        remote.DEADLINE_S,
        remote.TOTAL_DEADLINE_S,
        remote.MIN_RATE,
        remote.RATE_GRACE_S,
    )
    assert source._check_progress() == remote.DEADLINE_S  # the first request gets the per-request deadline


def test_remote_whole_read_deadline_at_the_limit_and_past() -> None:
    """The read's clock is set back instead of waiting: TOTAL_DEADLINE_S itself, not a copy."""
    source = _remote()
    source.bytes_fetched = 1 << 40  # far above the minimum rate: only the deadline can refuse
    source._started = time.monotonic() - (remote.TOTAL_DEADLINE_S - 1.0)
    assert 0 < source._check_progress() <= 1.0  # what is left, not the per-request deadline
    source._started = time.monotonic() - remote.TOTAL_DEADLINE_S
    with pytest.raises(
        ApplianceError,
        match=rf"too slow to finish \(limits: {remote.TOTAL_DEADLINE_S:g} s for the whole read",
    ):
        source._check_progress()


def test_remote_minimum_rate_at_the_limit_and_below() -> None:
    source = _remote()
    elapsed = remote.RATE_GRACE_S + 10.0
    source._started = time.monotonic() - elapsed
    source.bytes_fetched = int(remote.MIN_RATE * (elapsed + 1.0))  # the rate, with a second's slack
    assert source._check_progress() == remote.DEADLINE_S
    source.bytes_fetched = int(remote.MIN_RATE * (elapsed - 1.0))
    with pytest.raises(
        ApplianceError,
        match=r"^http://127.0.0.1:9/model.gguf: .* too slow to finish \(limits: .* "
        r"at least 16.00 KiB/s after 15 s",
    ):
        source._check_progress()
    early = _remote()
    early._started = time.monotonic() - (remote.RATE_GRACE_S - 1.0)
    assert early._check_progress() == remote.DEADLINE_S  # within the grace nothing is judged


class _Redirecting:
    """A 127.0.0.1 server: /hop/N redirects to /hop/N-1, /hop/0 serves 16 bytes by range."""

    def __init__(self) -> None:
        import http.server
        import threading

        body = bytes(range(16))

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                hops = int(self.path.rsplit("/", 1)[1])
                if hops:
                    self.send_response(302)
                    self.send_header("Location", f"/hop/{hops - 1}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes 0-3/{len(body)}")
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(body[:4])

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, hops: int) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hop/{hops}"


def test_remote_redirects_at_the_limit_and_one_past() -> None:
    server = _Redirecting()
    try:
        assert HttpRangeSource(server.url(MAX_REDIRECTS)).read(0, 4) == bytes(range(4))
        url = server.url(MAX_REDIRECTS + 1)
        with pytest.raises(ApplianceError, match=rf"^{url}: more than {MAX_REDIRECTS} redirects$"):
            HttpRangeSource(url).read(0, 4)
    finally:
        server.server.shutdown()
        server.server.server_close()


def test_header_budget_is_the_default_and_its_edge_holds(tmp_path: Path) -> None:
    """HEADER_BUDGET (64 MiB) is read_header's default; its edge is shown on a header of L
    bytes read with a budget of L (accepted) and of L - 1 (refused)."""
    assert (
        inspect.signature(gguf_header.read_header).parameters["budget"].default == gguf_header.HEADER_BUDGET
    )
    path = _one_tensor_gguf(tmp_path / "edge.gguf", [4])
    size = path.stat().st_size
    with closing(gguf_header.FileSource(path)) as source:
        assert gguf_header.read_header(source, budget=size).tensors[0].shape == (4,)
    with (
        closing(gguf_header.FileSource(path)) as source,
        pytest.raises(
            ApplianceError, match=rf"would end at byte {size}, over the {size - 1}-byte header budget"
        ),
    ):
        gguf_header.read_header(source, budget=size - 1)


# --- trace header bytes, key ids, generated tokens --------------------------------------------


def test_trace_header_bytes_at_the_limit_and_one_past() -> None:
    top = trace_format.MAX_HEADER_BYTES
    text = json.dumps(_header()).encode()
    at = trace_format.encode_trace_bytes(text + b" " * (top - len(text)))
    assert len(at) == trace_format.PREAMBLE_BYTES + top + trace_format.TRAILER_BYTES
    assert trace_format.parse_trace(at, "t")[0]["n_layers"] == 2
    past = trace_format.encode_trace_bytes(bytes(top + 1), pad=False, trailer=bytes(8))
    with pytest.raises(
        ConfigError, match=rf"^t: header length {top + 1} is over the {top}-byte limit; the trace is corrupt$"
    ):
        trace_format.parse_trace(past, "t")


def test_key_id_prefix_at_the_limit_and_one_short(tmp_path: Path) -> None:
    pair = dsse.init_keys(tmp_path / "keys")
    store = tmp_path / "store"
    trust.trust_key(pair.public, store)
    with pytest.raises(
        ConfigError,
        match=rf"^key id '{pair.keyid[: trust.MIN_ID_PREFIX - 1]}' is too short: give at least "
        rf"{trust.MIN_ID_PREFIX} characters",
    ):
        trust.untrust_key(pair.keyid[: trust.MIN_ID_PREFIX - 1], store)
    trust.untrust_key(pair.keyid[: trust.MIN_ID_PREFIX], store)
    assert trust.store_entries(store) == []


def test_tokens_per_trial_at_the_limit_and_one_past(tmp_path: Path) -> None:
    from appliance.core.strict_load import load_yaml
    from appliance.core.validation import schema_errors
    from tests.conftest import REPO

    raw = load_yaml(REPO / "appliance" / "profiles" / "qwen35-8g.yaml")
    raw["schedule"]["n_predict"] = limits.MAX_N_PREDICT
    assert schema_errors(raw, "profile") == []
    raw["schedule"]["n_predict"] = limits.MAX_N_PREDICT + 1
    top = limits.MAX_N_PREDICT
    assert schema_errors(raw, "profile") == [f"/schedule/n_predict: must be at most {top} (got {top + 1})"]
