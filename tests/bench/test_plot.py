"""The speed-up plot: optional matplotlib, and the series it draws."""

from __future__ import annotations

import sys

import pytest

from specmlx.bench import plot
from specmlx.bench.runs import Measurement
from specmlx.bench.summary import summarize
from specmlx.errors import SpecmlxError


def rows():
    def m(mode, drafter, k, temp, decode_s):
        drafted = 4 if k is None else k  # an automatic run drafts what it chose
        return Measurement(mode, drafter, temp, k, "a", (1, 2, 3, 4), decode_s, 2, 3, drafted, 1, "length")
    ms = [m("target", "", 0, t, 2.0) for t in (0.0, 0.7)]
    ms += [m(mode, "d", k, t, 1.0 + k / 10) for t in (0.0, 0.7) for k in (4, 1) for mode in ("mlx-lm-spec", "specmlx")]
    ms += [m("specmlx", "d+auto", None, t, 1.2) for t in (0.0, 0.7)]  # chosen each round: no k
    return summarize(ms, None)


def test_missing_matplotlib_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(SpecmlxError, match=r"^--plot needs matplotlib.*pip install matplotlib$"):
        plot.require()


def test_series_per_mode_and_drafter_sorted_by_k():
    series = plot.series(rows(), 0.7)
    assert set(series) == {("mlx-lm-spec", "d"), ("specmlx", "d")}  # the automatic length is a level
    assert [r.num_draft for r in series[("specmlx", "d")]] == [1, 4]
    assert all(r.temp == 0.7 for group in series.values() for r in group)


def test_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "speedup.png"
    plot.write_plot(rows(), path, "tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
