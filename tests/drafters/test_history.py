"""The hidden-state history kept for MTP drafters."""

import mlx.core as mx
import pytest

from specmlx.drafters.history import HiddenHistory
from specmlx.errors import SpecmlxError


def rows(start: int, n: int) -> mx.array:
    return mx.arange(start, start + n, dtype=mx.float32)[:, None] * mx.ones((1, 3))


def test_rows_span_chunks_and_rewinds_cut_them():
    history = HiddenHistory()
    history.observe(0, rows(0, 4))
    history.observe(4, rows(4, 5))  # a verify pass: five scored positions
    history.rewind(6)  # two of its drafts accepted
    assert history.length == 6
    assert history.rows(2, 6)[:, 0].tolist() == [2, 3, 4, 5]
    history.observe(6, rows(6, 2))
    assert history.rows(5, 8)[:, 0].tolist() == [5, 6, 7]


def test_observing_over_old_positions_replaces_them():
    history = HiddenHistory()
    history.observe(0, rows(0, 5))
    history.observe(3, rows(100, 2))
    assert history.rows(0, 5)[:, 0].tolist() == [0, 1, 2, 100, 101]


def test_gaps_and_missing_rows_are_errors():
    history = HiddenHistory()
    history.observe(0, rows(0, 2))
    with pytest.raises(SpecmlxError):
        history.observe(5, rows(5, 1))
    with pytest.raises(SpecmlxError):
        history.rows(1, 3)
