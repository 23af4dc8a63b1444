"""The target's hidden states along the committed sequence, for MTP drafters.

Rows arrive lazily from the engine (`observe`) and are cut back on `rewind`,
so after a rejection the drafter conditions on the last accepted position's
row: a slice of what verification already computed, never a recomputation.
The whole history is kept (about 6 KB a token for a 1.5B target) because a
new prompt may reuse any prefix of the last one.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.stream import make_cache
from ..caches.snapshot import capture_rows, leading, restore_rows
from ..errors import SpecmlxError
from ..hidden import decoder


def one_row(target: nn.Module) -> mx.array:
    """(1, 1, H): the target's final hidden state at one position, the row a history keeps a
    position (hidden size × the target's activation dtype: about 6 KB in float32, 3 KB in
    bfloat16, for a 1.5B target). Lazy and never evaluated: for sizing from shapes alone."""
    return decoder(target, mx.array([[0]], dtype=mx.uint32), make_cache(target))


class HiddenHistory:
    def __init__(self) -> None:
        self.chunks: list[tuple[int, mx.array]] = []  # (first position, (n, H) rows)
        self.length = 0  # positions 0..length-1 have rows

    def observe(self, start: int, rows: mx.array) -> None:
        if start > self.length:
            raise SpecmlxError(f"hidden states skip positions {self.length}..{start - 1}")
        self.rewind(start)
        self.chunks.append((start, rows))
        self.length = start + rows.shape[0]

    def rewind(self, length: int) -> None:
        """Keep rows for positions below `length`."""
        while self.chunks and self.chunks[-1][0] >= length:
            self.chunks.pop()
        if self.chunks:
            first, rows = self.chunks[-1]
            if first + rows.shape[0] > length:
                self.chunks[-1] = (first, rows[: length - first])
        self.length = min(self.length, length)

    def adopt(self, source: "HiddenHistory | None", length: int) -> int:
        """Hold `source`'s rows for its first `length` positions, or as many as it has, in a buffer of
        their own (the source's may be freed); how many. From None, none."""
        if source is None:
            return 0
        length = min(length, source.length)
        if length > 0:
            rows = mx.contiguous(source.rows(0, length))
            mx.eval(rows)
            self.observe(0, rows)
        return length

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        """Its rows for positions start..end-1, for the prompt cache on disk; none where it lacks them."""
        if not 0 <= start < end <= self.length:
            return {}
        rows = capture_rows(self.rows(start, end), prefix)
        mx.eval(list(rows.values()))
        return {f"{prefix}.span": mx.array([start, end], dtype=mx.int32), **rows}

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        """Hold the rows `blocks` (read from disk, from position 0) keep under `prefix`, in place of its
        own; how many positions."""
        self.rewind(0)
        count = leading(blocks, prefix)
        if count:
            self.observe(0, restore_rows(blocks[:count], prefix))
        return self.length

    @property
    def nbytes(self) -> int:
        """What its rows hold in memory now."""
        return sum(rows.nbytes for _, rows in self.chunks)

    def rows(self, start: int, stop: int) -> mx.array:
        """Rows for positions start..stop-1 (lazy slices, concatenated if needed)."""
        if not 0 <= start < stop <= self.length:
            raise SpecmlxError(f"no hidden states for positions {start}..{stop - 1} (have {self.length})")
        parts = []
        for first, rows in reversed(self.chunks):
            end = first + rows.shape[0]
            if end <= start:
                break
            parts.append(rows[max(start - first, 0) : min(stop, end) - first])
        parts.reverse()
        return parts[0] if len(parts) == 1 else mx.concatenate(parts)
