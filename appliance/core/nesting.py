"""How deep a JSON or YAML text nests, found before a recursive parser sees it (a parser
given a document nested 100,000 deep overflows the stack or takes seconds to fail)."""

from array import array
from itertools import accumulate

_OTHERS = bytes(set(range(256)) - set(b"[]{}"))
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes


def max_nesting(text: bytes | str) -> int:
    """Deepest nesting of [ and { (brackets inside strings count too, which only errs on the
    safe side for the documents this project reads)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    steps = array("b", data.translate(_STEPS, delete=_OTHERS))
    return max(0, max(accumulate(steps), default=0))
