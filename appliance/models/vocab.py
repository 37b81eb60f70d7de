"""A byte-level BPE vocabulary that llama.cpp accepts: the 256 GPT-2 byte symbols, one merge,
and Qwen's special tokens. Any text tokenizes (one token per byte, "  " merges to one)."""

from __future__ import annotations

from dataclasses import dataclass

from gguf.constants import TokenType

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = ("Ġ Ġ",)


def gpt2_byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onward."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    eos_id: int
    im_start_id: int
    im_end_id: int

    @property
    def normal_ids(self) -> list[int]:
        return [i for i, t in enumerate(self.token_types) if t == TokenType.NORMAL]


def byte_vocab() -> Vocab:
    tokens = gpt2_byte_symbols() + ["".join(m.split(" ")) for m in MERGES]
    types = [int(TokenType.NORMAL)] * len(tokens)
    first_special = len(tokens)
    tokens += list(SPECIALS)
    types += [int(TokenType.CONTROL)] * len(SPECIALS)
    return Vocab(
        tokens,
        types,
        list(MERGES),
        eos_id=first_special,
        im_start_id=first_special + 1,
        im_end_id=first_special + 2,
    )


def token_bytes(vocab: Vocab, token: int) -> bytes:
    """The bytes a normal token stands for (GPT-2 symbols mapped back to bytes)."""
    back = {symbol: b for b, symbol in enumerate(gpt2_byte_symbols())}
    return bytes(back[ch] for ch in vocab.tokens[token])


def padded_vocab(n_tokens: int) -> Vocab:
    """The byte vocabulary filled up to `n_tokens` with normal tokens `[synthN]` (a model's
    token embedding and output head have exactly one row per token)."""
    base = byte_vocab()
    fill = n_tokens - len(base.tokens)
    if fill < 0:
        raise ValueError(f"a vocabulary needs at least {len(base.tokens)} tokens, not {n_tokens}")
    tokens = base.tokens + [f"[synth{i}]" for i in range(fill)]
    types = base.token_types + [int(TokenType.NORMAL)] * fill
    return Vocab(tokens, types, base.merges, base.eos_id, base.im_start_id, base.im_end_id)
