"""The draft lengths a round may use: a small set, so that every verify shape is known in advance.

A GPU backend compiles kernels for each new shape on first use (MLX's CUDA backend took about
38 s for a 9-row verify of a 4-bit target), and a quantized matmul's cost jumps at some row
counts. A schedule therefore drafts only these lengths, each is warmed up before the first
answer, and each one's cost is measured on its own rather than drawn on a line.
"""

from __future__ import annotations

WIDTHS = (0, 1, 2, 3, 4, 6, 8)  # draft lengths k a schedule plans; a verify scores k + 1 rows
# and those of a copy (a lookup's, a prediction's): long copies of an edited file are where it pays most
COPIED = WIDTHS + (12, 16)


def widest(limit: int) -> int:
    """The longest draft length of the set within `limit` (0 when `limit` < 1)."""
    return max(k for k in WIDTHS if k <= max(limit, 0))


def within(limit: int) -> tuple[int, ...]:
    """The set's lengths up to `limit`, 0 included."""
    return tuple(k for k in WIDTHS if k <= limit)


def cut(tokens: list[int]) -> list[int]:
    """A copied draft (a lookup's, a prediction's) cut to the longest length of `COPIED` it covers."""
    return tokens[: max(k for k in COPIED if k <= len(tokens))]
