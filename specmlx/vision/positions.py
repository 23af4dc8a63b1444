"""Multimodal RoPE positions (Qwen2-VL's, which Qwen3-VL and Qwen3.5 keep): each token's time, height
and width positions. Text advances all three by one; an image's rows, merged `merge` × `merge` patches
of its (t, h, w) grid, sit at the image's start plus their place on the grid; text after an image
continues one past the largest of them. This is mlx-vlm's `get_rope_index` for images (tests check it
against that), written for one prompt on the host, where the engine needs it."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def grid_positions(start: int, grid: tuple[int, int, int], merge: int) -> np.ndarray:
    """The (3, rows) positions of one image's rows, its first at `start`, in the tower's row order."""
    t, h, w = grid[0], grid[1] // merge, grid[2] // merge
    tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + start


def mrope_positions(length: int, spans: Sequence[tuple[int, tuple[int, int, int]]], merge: int) -> np.ndarray:
    """The (3, length) positions of a prompt of `length` tokens whose images' rows begin at each span's
    start, with its grid (spans in order, not overlapping)."""
    out = np.empty((3, length), dtype=np.int64)
    index = position = 0  # the next token's index, and its position
    for start, grid in spans:
        out[:, index:start] = np.arange(position, position + start - index)
        position += start - index
        rows = grid_positions(position, grid, merge)
        out[:, start:start + rows.shape[1]] = rows
        index, position = start + rows.shape[1], int(rows.max()) + 1
    out[:, index:] = np.arange(position, position + length - index)
    return out


def end_anchored(positions: np.ndarray) -> tuple[np.ndarray, int]:
    """`positions` shifted so that the last token's equals its index, and the shift: what the images
    took back (`vision/__init__.py`: every later token is then rotated at its cache index)."""
    shift = positions.shape[1] - 1 - int(positions[0, -1])
    return positions + shift, shift
