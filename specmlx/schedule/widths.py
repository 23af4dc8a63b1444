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
# and those of a block drafter's: a draft of any length costs it one forward, so its acceptance length
# (6 to 7 of a block of 16 in z-lab's cards) is reached only past 8; 15 is a block of 16's whole proposal
BLOCKED = WIDTHS + (12, 15)


def widest(limit: int, blocks: bool = False) -> int:
    """The longest draft length of the set (a block drafter's: `blocks`) within `limit` (0 when `limit` < 1)."""
    return max(within(max(limit, 0), blocks))


def within(limit: int, blocks: bool = False) -> tuple[int, ...]:
    """The set's lengths up to `limit`, 0 included; with `blocks`, a block drafter's set."""
    return tuple(k for k in (BLOCKED if blocks else WIDTHS) if k <= limit)


def after(k: int, blocks: bool = False) -> int:
    """The length of the set (a block drafter's: `blocks`) after `k`; `k` itself past the longest."""
    return min((w for w in (BLOCKED if blocks else WIDTHS) if w > k), default=k)


def cut(tokens: list[int]) -> list[int]:
    """A copied draft (a lookup's, a prediction's) cut to the longest length of `COPIED` it covers."""
    return tokens[: max(k for k in COPIED if k <= len(tokens))]
