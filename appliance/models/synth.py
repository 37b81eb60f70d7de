"""Write a tiny MoE GGUF in one streaming pass: metadata and tensor infos through the `gguf`
package's writer, then each tensor's bytes (experts one at a time), so peak memory stays at
one expert slab plus the small tensors, whatever the file size."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter, Keys
from gguf.constants import LlamaFileType

from appliance.core import atomic
from appliance.core.errors import ApplianceError
from appliance.core.progress import ProgressFn, byte_counter
from appliance.models import weights
from appliance.models.shapes import Layout, ModelSynthSpec, TensorSpec, solve_layout
from appliance.models.vocab import Vocab, byte_vocab

SYNTH_FORMAT = 1  # bump when the same spec would produce different bytes
FILE_TYPES = {"f16": LlamaFileType.MOSTLY_F16, "q8_0": LlamaFileType.MOSTLY_Q8_0}


@dataclass(frozen=True)
class SynthResult:
    path: Path
    size_bytes: int
    sha256: str
    expert_ff: int
    expert_bytes: int
    layout: Layout
    stale_removed: tuple[Path, ...] = ()  # temporaries of killed earlier runs, now removed


def add_tokenizer(w: GGUFWriter, vocab: Vocab) -> None:
    w.add_string(Keys.Tokenizer.MODEL, "gpt2")
    w.add_string(Keys.Tokenizer.PRE, "qwen2")
    w.add_array(Keys.Tokenizer.LIST, vocab.tokens)
    w.add_array(Keys.Tokenizer.TOKEN_TYPE, vocab.token_types)
    w.add_array(Keys.Tokenizer.MERGES, vocab.merges)
    w.add_uint32(Keys.Tokenizer.EOS_ID, vocab.eos_id)
    w.add_uint32(Keys.Tokenizer.PAD_ID, vocab.eos_id)
    w.add_bool(Keys.Tokenizer.ADD_BOS, False)


def add_metadata(w: GGUFWriter, layout: Layout, vocab: Vocab) -> None:
    spec, d, a = layout.spec, layout.dims, layout.spec.arch
    w.add_name(f"appliance tiny {a} {spec.experts}x{spec.used} skew {spec.skew:g}")
    w.add_file_type(int(FILE_TYPES[spec.expert_type]))
    w.add_quantization_version(2)
    w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=a), d.context)
    w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=a), d.embd)
    w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=a), spec.layers)
    w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=a), layout.ff_exp)
    w.add_uint32(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=a), layout.ff_exp)
    w.add_uint32(Keys.LLM.EXPERT_COUNT.format(arch=a), spec.experts)
    w.add_uint32(Keys.LLM.EXPERT_USED_COUNT.format(arch=a), spec.used)
    w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=a), d.heads)
    w.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=a), d.heads_kv)
    w.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=a), d.head_dim)
    w.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=a), d.head_dim)
    w.add_float32(Keys.Attention.LAYERNORM_RMS_EPS.format(arch=a), 1e-6)
    w.add_float32(Keys.Rope.FREQ_BASE.format(arch=a), 1e6)
    if a == "qwen35moe":
        w.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), d.rope_dim_qwen35)
        quarter = d.rope_dim_qwen35 // 2
        w.add_array(
            Keys.Rope.DIMENSION_SECTIONS.format(arch=a),
            [quarter - 2 * (quarter // 3), quarter // 3, quarter // 3, 0],
        )
        w.add_uint32(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH.format(arch=a), d.shexp_ff)
        w.add_uint32(Keys.SSM.CONV_KERNEL.format(arch=a), d.ssm_conv)
        w.add_uint32(Keys.SSM.INNER_SIZE.format(arch=a), d.ssm_inner)
        w.add_uint32(Keys.SSM.STATE_SIZE.format(arch=a), d.ssm_state)
        w.add_uint32(Keys.SSM.TIME_STEP_RANK.format(arch=a), d.ssm_v_heads)
        w.add_uint32(Keys.SSM.GROUP_COUNT.format(arch=a), d.ssm_groups)
        w.add_uint32(Keys.LLM.FULL_ATTENTION_INTERVAL.format(arch=a), layout.full_attention_interval)
    else:
        w.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=a), d.head_dim)
    add_tokenizer(w, vocab)
    w.add_uint32("appliance.synth.format", SYNTH_FORMAT)
    w.add_uint32("appliance.synth.seed", spec.seed)
    w.add_float32("appliance.synth.skew", spec.skew)
    w.add_uint64("appliance.synth.size_request", spec.size_bytes)


def _write_header(writer: GGUFWriter, path: Path) -> bytes:
    """Write the writer's header, metadata, tensor infos and padding to `path` (left open for
    the tensor data); those bytes."""
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    fout = writer.fout[0]
    writer.write_padding(fout, fout.tell())
    fout.flush()
    return path.read_bytes()  # header only: nothing else written yet


def _stream_tensors(
    tensors: Iterable[Iterable[bytes | memoryview]],
    alignment: int,
    data_bytes: int,
    digest: Any,
    counted: Callable[[int], None],
    write: Callable[[memoryview | bytes], object] | None,
) -> None:
    """Each tensor's chunks with the alignment padding after each into `digest` (and `write`,
    when given); checks they come to the `data_bytes` the header declares."""
    total = 0
    for chunks in tensors:
        size = 0
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            if write is not None:
                write(view)
            digest.update(view)
            size += view.nbytes
            counted(view.nbytes)
        pad = bytes(-size % alignment)
        if write is not None:
            write(pad)
        digest.update(pad)
        counted(len(pad))
        total += size + len(pad)
    if total != data_bytes:
        raise AssertionError(f"wrote {total} bytes of tensor data, the header declares {data_bytes}")


def stream_gguf(
    writer: GGUFWriter,
    out: Path,
    tensors: Iterable[Iterable[bytes | memoryview]],
    data_bytes: int,
    progress: ProgressFn | None,
) -> str:
    """Write the writer's header and tensor infos, then each tensor's chunks (in the order of
    the infos) with the alignment padding after each, to `out` through a temporary name renamed
    when whole; the file's sha256, taken while writing (the file is never read back)."""
    try:
        with atomic.replacing_path(out) as tmp:
            digest = hashlib.sha256(_write_header(writer, tmp))
            assert writer.fout is not None
            written = byte_counter(f"writing {out.name}", data_bytes, progress)
            _stream_tensors(tensors, writer.data_alignment, data_bytes, digest, written, writer.fout[0].write)
            writer.close()
    except OSError as exc:
        writer.close()
        raise ApplianceError(f"cannot write {out}: {exc.strerror or exc}") from exc
    except BaseException:
        writer.close()
        raise
    return digest.hexdigest()


def digest_gguf(
    writer: GGUFWriter,
    tensors: Iterable[Iterable[bytes | memoryview]],
    data_bytes: int,
    progress: ProgressFn | None,
) -> tuple[int, str]:
    """The size and sha256 of the file stream_gguf would write, without writing it (the header
    goes through a small temporary file, the tensor bytes only through the hash)."""
    try:
        with tempfile.TemporaryDirectory(prefix="appliance-digest-") as tmp:
            header = _write_header(writer, Path(tmp) / "header.gguf")
            writer.close()
    except OSError as exc:
        writer.close()
        raise ApplianceError(f"cannot write a temporary GGUF header: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(header)
    hashed = byte_counter("hashing tensor data", data_bytes, progress)
    _stream_tensors(tensors, writer.data_alignment, data_bytes, digest, hashed, None)
    return len(header) + data_bytes, digest.hexdigest()


def synthesize(spec: ModelSynthSpec, out: Path, progress: ProgressFn | None = None) -> SynthResult:
    """Write the model to `out` (via a temporary name, renamed when complete); `progress`
    gets the tensor bytes written."""
    atomic.refuse_special(out)
    vocab = byte_vocab()
    layout = solve_layout(spec, len(vocab.tokens))
    design = weights.make_design(layout, vocab)
    stale = atomic.remove_stale_temporaries(out)
    writer = GGUFWriter(None, spec.arch)
    add_metadata(writer, layout, vocab)
    for t in layout.tensors:
        writer.add_tensor_info(
            t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype
        )
    data_bytes = sum(t.nbytes + -t.nbytes % writer.data_alignment for t in layout.tensors)

    def tensor_bytes(t: TensorSpec) -> Iterator[bytes]:
        if t.role == "experts":
            yield from weights.expert_slabs(layout, t)
        else:
            yield weights.dense_bytes(layout, design, t)

    sha256 = stream_gguf(writer, out, (tensor_bytes(t) for t in layout.tensors), data_bytes, progress)
    expert_bytes = sum(t.nbytes for t in layout.tensors if t.role == "experts")
    return SynthResult(out, out.stat().st_size, sha256, layout.ff_exp, expert_bytes, layout, tuple(stale))
