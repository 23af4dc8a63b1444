"""Multimodal positions as mlx-vlm computes them for Qwen3.5 (`get_rope_index`), for prompts with images of
different grids; and the end-anchored shift that puts the last token at its index."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specmlx.vision.positions import end_anchored, mrope_positions

IMAGE, START = 7, 6


def theirs(tokens: list[int], grids: list[tuple[int, int, int]]) -> np.ndarray:
    """mlx-vlm's positions for `tokens` (its `get_rope_index` reads only the config's token ids and merge)."""
    from types import SimpleNamespace

    from mlx_vlm.models.qwen3_5.language import LanguageModel

    config = SimpleNamespace(image_token_id=IMAGE, video_token_id=99, vision_start_token_id=START,
                             vision_config=SimpleNamespace(spatial_merge_size=2))
    positions, _ = LanguageModel.get_rope_index(SimpleNamespace(config=config), mx.array([tokens]),
                                                mx.array(grids))
    return np.array(positions[:, 0, :])


@pytest.mark.parametrize("grids", [[(1, 4, 6)], [(1, 8, 4), (1, 2, 2)], [(1, 6, 6), (1, 4, 10), (1, 2, 4)]])
def test_positions_are_mlx_vlms(grids):
    tokens, spans = [1, 2, 3], []
    for grid in grids:
        tokens.append(START)
        spans.append((len(tokens), grid))
        tokens += [IMAGE] * (grid[0] * grid[1] * grid[2] // 4) + [8, 9]
    ours = mrope_positions(len(tokens), spans, 2)
    assert ours.tolist() == theirs(tokens, grids).tolist()


def test_the_shift_puts_the_last_token_at_its_index_and_keeps_every_difference():
    positions = mrope_positions(20, [(3, (1, 4, 8))], 2)  # 8 rows that advance the position by 4
    shifted, shift = end_anchored(positions)
    assert shift == 4 and shifted[:, -1].tolist() == [19, 19, 19]
    assert (shifted - positions == shift).all()
    assert end_anchored(mrope_positions(5, [], 2))[1] == 0  # text alone: no shift
