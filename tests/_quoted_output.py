"""Quoted outputs against what the code prints: the text exactly, full-precision floats to
a few units in the last place.

A float printed with all its digits (Python's repr: 11 or more decimals here) can
differ in its last digits from one machine to the next with the same code: numpy picks
its exp / log kernels by the processor's instruction set, and their roundings differ
within an ulp.  Such floats are compared to a relative 1e-12 (the engine's rounding is
certified far below any change in its bounds, which moves them by 1e-7 or more); every
other character, shorter numbers included, must be the same.
"""
import re

#: a float literal with 11 or more decimals (the repr of a computed bound)
LONG_FLOAT = r"-?\d+\.\d{11,}(?:e[+-]?\d+)?"
#: relative tolerance for them
REL = 1e-12


def _pattern(expected: str) -> "re.Pattern":
    parts, last = [], 0
    for m in re.finditer(LONG_FLOAT, expected):
        parts.append(re.escape(expected[last:m.start()]))
        parts.append(f"({LONG_FLOAT})")
        last = m.end()
    parts.append(re.escape(expected[last:]))
    return re.compile("".join(parts))


def _close(got: str, want: str) -> bool:
    a, b = float(got), float(want)
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


def contains(text: str, expected: str) -> bool:
    """``expected`` occurs in ``text``, its long floats to REL."""
    want = re.findall(LONG_FLOAT, expected)
    for m in _pattern(expected).finditer(text):
        if all(_close(g, w) for g, w in zip(m.groups(), want)):
            return True
    return False


def same(text: str, expected: str) -> bool:
    """``text`` is ``expected``, its long floats to REL."""
    m = _pattern(expected).fullmatch(text)
    return m is not None and all(_close(g, w) for g, w in
                                 zip(m.groups(), re.findall(LONG_FLOAT, expected)))
