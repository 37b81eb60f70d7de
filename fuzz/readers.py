"""One harness per reader: valid seeds made by the project's own writers, a structure-aware
mutation, and what a case runs (the reader and the code that consumes what it accepts).

`setup(workdir)` runs in the parent before workers fork (seeds, fixtures, warm caches);
`run(case)` runs in a worker and raises the project's ApplianceError to refuse a case.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz import gguf_cases, remote_server
from fuzz.mutate import mutate_bytes, mutate_tree

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Reader:
    name: str
    setup: Callable[[Path], list[bytes]]  # seeds
    mutate: Callable[[random.Random, bytes], bytes]
    run: Callable[[bytes], None]
    workers: int = 2  # more for readers that mostly wait (the remote one's slow servers)
    seeds: list[bytes] = field(default_factory=list)


def _scratch() -> Path:
    """A directory of this worker's own (made on first use, removed with the run's workdir)."""
    base = Path(os.environ["APPLIANCE_FUZZ_WORKDIR"]) / f"worker-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    return base


# GGUF header -> accounting -> plan -> text, as `appliance plan FILE` does


class MemorySource:
    def __init__(self, data: bytes) -> None:
        self.data, self.name = data, "case.gguf"

    def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]

    def total_size(self) -> int | None:
        return len(self.data)


def _plan_all(source: Any) -> None:
    from appliance.planner.accounting import account_source
    from appliance.planner.plan import PlanLimits, make_plan
    from appliance.planner.render import render

    acc = account_source(source)
    acc.summary()
    for vram in (0, 24 << 30):
        plan = make_plan(acc, PlanLimits(ram_bytes=8 << 30, vram_bytes=vram, hit_rate=0.5))
        render(acc, plan, "fuzz", "given")


def run_gguf(case: bytes) -> None:
    _plan_all(MemorySource(case))


# the same through HTTP range requests from a server that misbehaves


def run_remote(case: bytes) -> None:
    from appliance.core.checks import one_line
    from appliance.core.errors import ApplianceError

    url = remote_server.serve(case[0], case[1:])
    try:
        _plan_remote(url)
    except ApplianceError as exc:
        if one_line(str(exc)) != str(exc):
            raise AssertionError(f"a refusal carries what the server sent unescaped: {exc!r}") from None
        raise


def _plan_remote(url: str) -> None:
    from appliance.planner.remote import HttpRangeSource

    _plan_all(
        HttpRangeSource(
            url,
            deadline_s=remote_server.CLIENT_DEADLINE_S,
            total_deadline_s=remote_server.CLIENT_TOTAL_DEADLINE_S,
            rate_grace_s=remote_server.CLIENT_RATE_GRACE_S,
        )
    )


def remote_seeds(workdir: Path) -> list[bytes]:
    return [bytes([remote_server.NORMAL]) + h for h in gguf_cases.seed_headers(workdir)]


def mutate_remote(rng: random.Random, seed: bytes) -> bytes:
    mode = remote_server.pick_mode(rng)
    body = gguf_cases.mutate(rng, seed[1:]) if rng.random() < 0.6 else seed[1:]
    return bytes([mode]) + body


# route traces -> info, replay, curves


def trace_seeds(workdir: Path) -> list[bytes]:
    import numpy as np

    from appliance.trace.format import row_dtype, write_trace
    from appliance.trace.synth import TraceSynthSpec, synth_trace

    seeds = []
    for i, spec in enumerate(
        (
            TraceSynthSpec(n_layers=2, n_experts=8, k=2, n_prompt=6, n_ubatch=4, n_decode=8, seed=1),
            TraceSynthSpec(n_layers=3, n_experts=16, k=4, n_prompt=0, n_decode=12, skew=0.0, seed=2),
        )
    ):
        trace = synth_trace(spec)
        header, rows = dict(trace.header), trace.rows
        if i == 1:  # with gate weights
            weighted = np.zeros(len(rows), dtype=row_dtype(spec.k, True))
            for name in rows.dtype.names or ():
                weighted[name] = rows[name]
            weighted["weights"] = 0.25
            header["has_weights"], rows = True, weighted
        path = write_trace(workdir / f"seed-{i}.moetrace", header, rows)
        seeds.append(path.read_bytes())
    empty = dict(trace.header)
    path = write_trace(workdir / "seed-empty.moetrace", empty, trace.rows[:0])
    seeds.append(path.read_bytes())
    return seeds


def _trace_parts(data: bytes) -> tuple[dict[str, Any], bytes]:
    from appliance.trace.format import PREAMBLE, PREAMBLE_BYTES, TRAILER_BYTES

    header_len = PREAMBLE.unpack_from(data)[2]
    header = json.loads(data[PREAMBLE_BYTES : PREAMBLE_BYTES + header_len])
    return header, data[PREAMBLE_BYTES + header_len : -TRAILER_BYTES]


def mutate_trace(rng: random.Random, seed: bytes) -> bytes:
    from appliance.trace.format import encode_trace_bytes

    header, rows = _trace_parts(seed)
    row_size = 12 + (8 if header["has_weights"] else 4) * header["n_expert_used"]
    n_rows = len(rows) // row_size
    text = json.dumps(header).encode()
    roll = rng.random()
    if roll < 0.4:
        text = json.dumps(mutate_tree(rng, header)).encode()
    elif roll < 0.55:
        key = rng.choice(
            ("n_layers", "n_experts", "n_expert_used", "moe_layers", "has_weights", "version", "format")
        )
        changed = dict(header)
        changed[key] = rng.choice(
            (
                0,
                -1,
                1,
                2,
                3,
                1 << 16,
                1 << 40,
                1 << 62,
                10**20,
                [0, 10**20],
                [1, 0],
                [],
                True,
                2.5,
                "x",
                None,
                list(range(5000)),
            )
        )
        text = json.dumps(changed).encode()
    elif roll < 0.6:
        text = text[:-1] + b', "big": ' + b"9" * rng.choice((400, 5000)) + b"}"
    elif roll < 0.65:
        depth = rng.choice((100, 100000))
        text = text[:-1] + b', "deep": ' + b"[" * depth + b"0" + b"]" * depth + b"}"
    elif roll < 0.8 and n_rows:  # rows: a field set to a boundary value
        buf = bytearray(rows)
        at = rng.randrange(n_rows) * row_size
        offset, width = rng.choice(((0, 4), (4, 2), (6, 1), (8, 4), (12, 4), (row_size - 4, 4)))
        value = rng.choice((0, 1, (1 << (8 * width)) - 1, 1 << (8 * width - 1), 7))
        buf[at + offset : at + offset + width] = value.to_bytes(width, "little")
        rows = bytes(buf)
    elif roll < 0.85:
        n_rows = rng.choice((0, n_rows + 1, n_rows - 1, 1 << 40, (1 << 64) - 1)) % (1 << 64)
    else:
        return mutate_bytes(rng, seed)
    return encode_trace_bytes(text, rows, row_count=n_rows)


def run_trace(case: bytes) -> None:
    from appliance.trace.curves import curves_report, default_capacities
    from appliance.trace.events import trace_events
    from appliance.trace.format import Trace, parse_trace
    from appliance.trace.info import trace_info
    from appliance.trace.names import ADMISSIONS
    from appliance.trace.replay import ReplaySetup, replay_report, uniform_expert_bytes

    header, rows = parse_trace(case, where="case.moetrace")
    trace = Trace(header=header, rows=rows)
    json.dumps(trace_info(trace))
    events = trace_events(trace, row_order=True)
    setup = ReplaySetup(
        events=events,
        k=trace.k,
        expert_bytes=uniform_expert_bytes(trace.moe_layers, 1 << 20),
        calibration=None,
    )
    for scope in ("per-layer", "global"):
        caps = default_capacities(setup, scope, points=3)
        replay_report(setup, header, ["lru", "lfu", "belady", "static-hot", "least-stale"], caps, scope)
        # byte budgets (the smallest that holds a token's experts, and four times it), both models
        least = trace.k * (1 << 20) * (len(trace.moe_layers) if scope == "per-layer" else 1)
        for admission in ADMISSIONS:
            replay_report(
                setup, header, ["lru", "belady", "least-stale"], [], scope, [least, 4 * least], admission
            )
        curves_report(setup, header, ["lru", "fifo"], caps, scope)


# engine lock and profiles, through the public loaders


# other tools' routing records (trace import) -> .moetrace rows -> the header check

IMPORT_MODEL = {  # a model layout as gguf_trace_fields gives it (3 MoE blocks, 16 experts, k 2)
    "arch": "qwen3moe",
    "model_file": "m.gguf",
    "model_bytes": 1,
    "model_sha256": None,
    "n_layers": 4,
    "moe_layers": [0, 1, 3],
    "n_experts": 16,
    "n_expert_used": 2,
}


def import_seeds(workdir: Path) -> list[bytes]:
    csv = b"0,3\n0,7\n0,1\n0,15\n1,2\n1,4\n1,9\n1,0\n3,5\n3,6\n0,3\n0,8\n1,2\n1,11\n3,5\n3,12\n"
    routed = [[[3, 7], [2, 4], [0, 0], [5, 6]], [[1, 15], [9, 0], [0, 0], [5, 6]]]
    vllm = json.dumps([{"prompt_token_ids": [1], "routed_experts": routed}]).encode()
    route = (
        b"# route_trace v1\n# model=/m/x.gguf arch=a n_layer=2 n_expert=8 n_expert_used=2\n"
        b"# layer=0 expert_bytes=10 dense_bytes=1\n# layer=1 expert_bytes=20 dense_bytes=1\n"
        b"turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
        b"0,0,0,0,0,3,0.6,0,10\n0,0,0,0,1,1,0.4,0,10\n0,0,1,0,0,2,0.5,1,0\n0,0,1,0,1,4,0.5,0,10\n"
        b"0,0,1,1,0,5,0.5,0,20\n0,0,1,1,1,6,0.5,0,20\n0,1,2,0,0,3,0.9,1,0\n0,1,2,0,1,7,0.1,0,10\n"
        b"0,1,2,1,0,5,0.8,1,0\n0,1,2,1,1,0,0.2,0,20\n"
    )
    records = [
        {"layer": 0, "token": 0, "phase": "prompt", "experts": [3, 7], "weights": [0.5, 0.5]},
        {"layer": 1, "token": 0, "phase": "prompt", "experts": [2, 4], "weights": [0.5, 0.5]},
        {"layer": 0, "token": 1, "phase": "decode", "experts": [1, 15], "weights": [0.9, 0.1]},
        {"layer": 3, "token": 1, "phase": "decode", "experts": [5, 6], "weights": [0.9, 0.1]},
    ]
    jsonl = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    return [b"C" + csv, b"V" + vllm, b"R" + route, b"J" + jsonl]


def mutate_import(rng: random.Random, seed: bytes) -> bytes:
    kind, body = seed[:1], seed[1:]
    if kind == b"V" and rng.random() < 0.6:
        return kind + mutate_json(rng, body)
    return kind + mutate_bytes(rng, body)


def run_import(case: bytes) -> None:
    from appliance.trace.format import encode_trace_bytes, parse_trace
    from appliance.trace.interchange import import_trace

    path = _scratch() / "routes"
    path.write_bytes(case[1:])
    fmt = {b"V": "vllm", b"R": "route-trace-csv", b"J": "jsonl"}.get(case[:1], "llamacpp-csv")
    trace = import_trace(path, fmt, None if fmt == "route-trace-csv" else IMPORT_MODEL)
    parse_trace(encode_trace_bytes({**trace.header}, trace.rows), where="imported")


def lock_seeds(workdir: Path) -> list[bytes]:
    return [(REPO / "engine" / "llama.cpp.lock.json").read_bytes()]


def mutate_json(rng: random.Random, seed: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.75:
        return json.dumps(mutate_tree(rng, json.loads(seed)), indent=rng.choice((None, 2))).encode()
    if roll < 0.8:
        return b'{"a": ' * 200000 + b"1" + b"}" * 200000
    if roll < 0.85:
        return seed.replace(b'"', b'"\xff', 1)
    return mutate_bytes(rng, seed)


def run_lock(case: bytes) -> None:
    from appliance.engine.lock import load_lock

    path = _scratch() / "lock.json"
    path.write_bytes(case)
    lock = load_lock(path)
    _ = lock.digest


def profile_seeds(workdir: Path) -> list[bytes]:
    from appliance.runs.profile import PROFILES_DIR

    return [p.read_bytes() for p in sorted(PROFILES_DIR.glob("*.yaml"))]


_parsed: dict[bytes, Any] = {}


def mutate_yaml(rng: random.Random, seed: bytes) -> bytes:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    roll = rng.random()
    if roll < 0.7:
        if seed not in _parsed:
            _parsed[seed] = yaml.load(seed, Loader=loader)  # noqa: S506 - a safe loader
        tree = mutate_tree(rng, _parsed[seed])
        return yaml.dump(tree, Dumper=dumper, allow_unicode=True).encode()
    if roll < 0.74:
        return b"a: &a [" + b"*a," * 8 + b"]\n" + b"b: &b [" + b"*a," * 8 + b"]\n"
    if roll < 0.78:
        return b"[" * 100000 + b"]" * 100000
    if roll < 0.82:
        return seed.replace(b"name:", b"name:\xff", 1)
    if roll < 0.86:
        return seed + b"\nname: duplicate\n"
    return mutate_bytes(rng, seed)


def run_profile(case: bytes) -> None:
    from appliance.runs.plan import trial_plan
    from appliance.runs.profile import load_profile

    path = _scratch() / "case.yaml"
    path.write_bytes(case)
    profile = load_profile(str(path))
    trial_plan(profile)


# bundle manifest and attestation, through the public verifier

BUNDLE_FILES = ("manifest.json", "attestation.dsse.json")


def bundle_seeds(workdir: Path) -> list[bytes]:
    import sys

    sys.path.insert(0, str(REPO))
    from appliance.attest.bundle import finalize_bundle
    from appliance.attest.dsse import init_keys
    from tests.fake_run import make_run

    keys = init_keys(workdir / "keys")
    run = make_run(workdir / "bundle")
    finalize_bundle(run, keys.private)
    os.environ["APPLIANCE_FUZZ_BUNDLE"] = str(run)
    os.environ["APPLIANCE_FUZZ_PUBKEY"] = str(keys.public)
    return [bytes([i]) + (run / name).read_bytes() for i, name in enumerate(BUNDLE_FILES)]


def mutate_bundle(rng: random.Random, seed: bytes) -> bytes:
    which, data = seed[0], seed[1:]
    if which == 1 and rng.random() < 0.5:  # the signed statement inside the envelope
        envelope = json.loads(data)
        try:
            statement = json.loads(base64.b64decode(envelope["payload"]))
            envelope["payload"] = base64.b64encode(json.dumps(mutate_tree(rng, statement)).encode()).decode()
        except (KeyError, ValueError):
            pass
        return bytes([which]) + json.dumps(envelope).encode()
    return bytes([which]) + mutate_json(rng, data)


def run_bundle(case: bytes) -> None:
    from appliance.attest.verify import Verdict, verify_bundle
    from appliance.core.errors import ApplianceError

    run = _scratch() / "bundle"
    if not run.exists():
        shutil.copytree(os.environ["APPLIANCE_FUZZ_BUNDLE"], run)
    which = BUNDLE_FILES[case[0] % 2]
    original = (run / which).read_bytes()
    (run / which).write_bytes(case[1:])
    try:
        result = verify_bundle(run, Path(os.environ["APPLIANCE_FUZZ_PUBKEY"]))
    finally:
        (run / which).write_bytes(original)
    if any("\n" in check.reason for check in result.checks):
        raise AssertionError("a verification check's reason is not one line")
    if result.verdict is not Verdict.VERIFIED:
        raise ApplianceError(f"bundle {result.verdict}")


# a key file, a trust-store entry and an export sidecar: the case's first byte says what the
# path is (a regular file holding the rest, a FIFO, a symlink to /dev/zero, a directory)

PLAIN, FIFO, DEV_ZERO, DIRECTORY = range(4)


def _place_case(path: Path, case: bytes) -> Path:
    """The case at path, as the file kind its first byte names (anything left there removed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    kind = case[0] % 4
    if kind == FIFO:
        os.mkfifo(path)
    elif kind == DEV_ZERO:
        path.symlink_to("/dev/zero")
    elif kind == DIRECTORY:
        path.mkdir()
    else:
        path.write_bytes(case[1:])
    return path


def _with_kind(rng: random.Random, seed: bytes, body: bytes) -> bytes:
    kind = rng.choice((FIFO, DEV_ZERO, DIRECTORY)) if rng.random() < 0.05 else seed[0]
    return bytes([kind]) + body


def key_seeds(workdir: Path) -> list[bytes]:
    from appliance.attest.dsse import init_keys

    keys = init_keys(workdir / "fuzz-keys")
    os.environ["APPLIANCE_FUZZ_KEYID"] = keys.keyid
    return [bytes([PLAIN]) + keys.public.read_bytes()]


def mutate_key(rng: random.Random, seed: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        body = b'{"keytype": "ed25519", "n": ' + b"9" * rng.choice((400, 5000)) + b"}"
    else:
        body = mutate_json(rng, seed[1:])
    return _with_kind(rng, seed, body)


def run_key(case: bytes) -> None:
    from appliance.attest.dsse import load_public_key

    key = load_public_key(_place_case(_scratch() / "case.pub.json", case))
    _ = key.keyid


def trust_seeds(workdir: Path) -> list[bytes]:
    from appliance.attest.dsse import init_keys

    bundle_seeds(workdir)  # a genuine bundle sealed by the key in APPLIANCE_FUZZ_PUBKEY
    other = init_keys(workdir / "other-keys")  # the seed entry: another key, under its own id
    os.environ["APPLIANCE_FUZZ_ENTRY_ID"] = other.keyid
    return [bytes([PLAIN]) + other.public.read_bytes()]


def run_trust(case: bytes) -> None:
    """A genuine bundle, verified against a trust store that holds its key and the case as a
    second entry: it must verify whatever the entry is; an entry skipped counts as refused."""
    from appliance.attest.dsse import load_public_key
    from appliance.attest.trust import TRUSTED_SUFFIX, trust_key
    from appliance.attest.verify import Verdict, verify_bundle
    from appliance.core.errors import ApplianceError

    store = _scratch() / "trusted-keys"
    os.environ["APPLIANCE_TRUSTED_KEYS"] = str(store)
    public = Path(os.environ["APPLIANCE_FUZZ_PUBKEY"])
    genuine = load_public_key(public)
    if not (store / f"{genuine.keyid}{TRUSTED_SUFFIX}").exists():
        trust_key(public, store)
    run = _scratch() / "trust-bundle"
    if not run.exists():
        shutil.copytree(os.environ["APPLIANCE_FUZZ_BUNDLE"], run)
    entry = _place_case(store / f"{os.environ['APPLIANCE_FUZZ_ENTRY_ID']}{TRUSTED_SUFFIX}", case)
    result = verify_bundle(run)
    if result.verdict is not Verdict.VERIFIED:
        raise AssertionError(f"a trust-store entry broke a genuine bundle's verification: {result.summary()}")
    skipped = [c for c in result.checks if c.name == "trust-store"]
    if any("\n" in c.reason or str(entry) not in c.reason for c in skipped):
        raise AssertionError(f"the warning for a skipped entry is not one line naming it: {skipped}")
    if skipped:
        raise ApplianceError(skipped[0].reason)


def sidecar_seeds(workdir: Path) -> list[bytes]:
    from securesystemslib.signer import CryptoSigner

    from appliance.attest.dsse import key_as_dict
    from appliance.images.archive import SCHEMA, sign_sidecar

    signer = CryptoSigner.generate_ed25519()
    public = workdir / "sidecar-key.pub.json"
    public.write_text(json.dumps(key_as_dict(signer.public_key)))
    os.environ["APPLIANCE_FUZZ_SIDECAR_KEY"] = str(public)
    record = {
        "schema": SCHEMA,
        "target": "cpu",
        "tag": "moe-appliance:cpu",
        "image_id": "sha256:" + "ab" * 32,
        "labels": {"org.opencontainers.image.title": "engine", "io.moe-appliance.target": "cpu"},
        "lock_digest": "cd" * 32,
        "archive": {"sha256": "ef" * 32, "bytes": 123456},
        "exported_by": signer.public_key.keyid,
    }
    return [bytes([PLAIN]) + json.dumps(sign_sidecar(record, signer)).encode()]


def mutate_sidecar(rng: random.Random, seed: bytes) -> bytes:
    data = seed[1:]
    if rng.random() < 0.5:  # the signed record inside the envelope
        envelope = json.loads(data)
        record = json.loads(base64.b64decode(envelope["payload"]))
        envelope["payload"] = base64.b64encode(json.dumps(mutate_tree(rng, record)).encode()).decode()
        body = json.dumps(envelope).encode()
    else:
        body = mutate_json(rng, data)
    return _with_kind(rng, seed, body)


def run_sidecar(case: bytes) -> None:
    from appliance.attest.dsse import load_public_key
    from appliance.images.archive import read_sidecar, verify_sidecar

    sidecar = read_sidecar(_place_case(_scratch() / "engine.tar.sidecar.json", case))
    sidecar.record()
    verify_sidecar(sidecar, load_public_key(Path(os.environ["APPLIANCE_FUZZ_SIDECAR_KEY"])))


# an incomplete run's files, handed to --resume: one file of a genuine sealed run replaced by
# the case (first byte: which file; second: its kind); resume must refuse any change in one
# line, leave the directory as it found it, and accept the genuine directory

RESUME_FILES = (
    "run.json",
    "manifest.json",
    "attestation.dsse.json",
    "inputs/profile.yaml",
    "inputs/model.json",
    "trials/001-baseline-r1/trial.json",
    "trials/001-baseline-r1/timing.json",
)


def resume_seeds(workdir: Path) -> list[bytes]:
    import sys

    sys.path.insert(0, str(REPO))
    from appliance.attest.dsse import init_keys
    from tests.fake_run import sealed_incomplete_run

    keys = init_keys(workdir / "resume-keys")
    run, _ = sealed_incomplete_run(workdir / "resume", keys)
    os.environ["APPLIANCE_FUZZ_RESUME_RUN"] = str(run)
    os.environ["APPLIANCE_FUZZ_RESUME_KEY"] = str(keys.private)
    return [bytes([i, PLAIN]) + (run / name).read_bytes() for i, name in enumerate(RESUME_FILES)]


def mutate_resume(rng: random.Random, seed: bytes) -> bytes:
    if rng.random() < 0.05:  # the genuine directory: it must resume
        return seed
    which, body = seed[0], seed[2:]
    mutated = mutate_yaml(rng, body) if RESUME_FILES[which].endswith(".yaml") else mutate_json(rng, body)
    return bytes([which]) + _with_kind(rng, seed[1:], mutated)


def _tree_state(directory: Path) -> list[tuple[str, bytes | str]]:
    """Each entry's path with its bytes (regular files) or its kind (anything else, unread)."""
    state: list[tuple[str, bytes | str]] = []
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        regular = path.is_file() and not path.is_symlink()
        state.append((name, path.read_bytes() if regular else ("dir" if path.is_dir() else "other")))
    return state


def run_resume(case: bytes) -> None:
    import sys

    sys.path.insert(0, str(REPO))
    from rich.console import Console

    from appliance.core.errors import ApplianceError
    from appliance.engine.lock import load_lock
    from appliance.runs.plan import trial_plan
    from appliance.runs.profile import load_profile
    from appliance.runs.resume import resume_point
    from appliance.runs.trial import RunContext
    from appliance.workflows.resume_check import resume_verifier
    from tests.fake_run import RESUME_IMAGE_ID, resume_model

    genuine = Path(os.environ["APPLIANCE_FUZZ_RESUME_RUN"])
    run = _scratch() / "resume-run"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(genuine, run, symlinks=True)
    os.environ["APPLIANCE_TRUSTED_KEYS"] = str(_scratch() / "no-trusted-keys")
    name = RESUME_FILES[case[0] % len(RESUME_FILES)]
    _place_case(run / name, case[1:])
    changed = _tree_state(run) != _tree_state(genuine)
    if name == "manifest.json" and changed and case[1] % 4 == PLAIN:  # the index: its content counts
        with contextlib.suppress(ValueError, RecursionError):  # unparsable: a change
            changed = json.loads(case[2:]) != json.loads((genuine / name).read_bytes())
    before = _tree_state(run)
    profile = load_profile("tiny-oversub")
    ctx = RunContext(None, profile, None, resume_model(), None, run, "new", Console(quiet=True))  # type: ignore[arg-type]
    try:
        resume_point(
            ctx,
            trial_plan(profile, 1),
            load_lock().raw,
            resume_verifier(Path(os.environ["APPLIANCE_FUZZ_RESUME_KEY"])),
            RESUME_IMAGE_ID,
        )
    except ApplianceError:
        if _tree_state(run) != before:
            raise AssertionError(f"a refused resume changed the directory ({name})") from None
        if not changed:
            raise AssertionError("the genuine incomplete run was refused") from None
        raise
    if changed:
        raise AssertionError(f"a run whose {name} was changed was resumed")


READERS = {  # cheapest first
    "gguf": Reader("gguf", gguf_cases.seed_headers, gguf_cases.mutate, run_gguf),
    "lock": Reader("lock", lock_seeds, mutate_json, run_lock),
    "trace": Reader("trace", trace_seeds, mutate_trace, run_trace),
    "trace-import": Reader("trace-import", import_seeds, mutate_import, run_import),
    "remote": Reader("remote", remote_seeds, mutate_remote, run_remote, workers=4),
    "profile": Reader("profile", profile_seeds, mutate_yaml, run_profile),
    "bundle": Reader("bundle", bundle_seeds, mutate_bundle, run_bundle),
    "key": Reader("key", key_seeds, mutate_key, run_key),
    "sidecar": Reader("sidecar", sidecar_seeds, mutate_sidecar, run_sidecar),
    "trust-store": Reader("trust-store", trust_seeds, mutate_key, run_trust),
    "resume": Reader("resume", resume_seeds, mutate_resume, run_resume),
}


def workdir() -> Path:
    """A fresh directory for seeds and the workers' files, in memory where there is a tmpfs
    (cases are written to files a hundred thousand times)."""
    shm = Path("/dev/shm")
    return Path(
        tempfile.mkdtemp(
            prefix="appliance-fuzz-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        )
    )
