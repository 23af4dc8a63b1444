"""The live stats panel: speed, speedup over plain decoding, acceptance, a sparkline."""

from __future__ import annotations

from typing import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ..figures import Figures

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[int], top: int, width: int) -> str:
    """The last `width` values as bars on a fixed 0..top scale (▁ = no draft accepted)."""
    if not values:
        return ""
    top = max(top, max(values), 1)
    return "".join(BARS[round(v / top * (len(BARS) - 1))] for v in values[-width:])


def speedup(figures: Figures) -> str:
    if figures.measuring:
        return "measuring…"
    if figures.baseline_tps is None:
        return "n/a — press ctrl+b\nto measure"
    if not figures.tps or figures.baseline_tps <= 0:
        return "n/a"
    return f"{figures.tps / figures.baseline_tps:.2f}×\nvs plain {figures.baseline_tps:.1f} tok/s\non the same prompt"


def accepted(figures: Figures) -> str:
    """The share of drafted tokens accepted; once known to be none were drafted, say so."""
    if figures.acceptance is not None and figures.tokens:
        return f"{figures.acceptance:.0%}"
    if figures.tokens and (figures.finished or figures.draft == "off"):
        return "no drafts"
    return "…"


def draft_length(figures: Figures) -> str:
    """The setting, and with auto the length of the latest round and how many drafted nothing."""
    lengths = figures.draft_lengths
    if figures.draft != "auto" or not lengths:
        return figures.draft
    plain = sum(k == 0 for k in lengths)
    return f"auto: {lengths[-1]} now\n{plain}/{len(lengths)} rounds plain"


class StatsPanel(Static):
    def __init__(self, figures: Figures = Figures(), **kwargs) -> None:
        super().__init__(**kwargs)
        self.figures = figures

    def on_mount(self) -> None:
        self.show(self.figures)

    def show(self, figures: Figures) -> None:
        self.figures = figures
        self.update(self._content(figures))

    def on_resize(self) -> None:
        self.show(self.figures)  # the sparkline fits the width

    def _content(self, f: Figures) -> Group:
        def number(value: float | None, fmt: str) -> str:
            return "…" if value is None else fmt.format(value)

        width = max((self.content_size.width or 30), 8)
        top = max(f.draft_lengths, default=int(f.draft) if f.draft.isdigit() else 0)
        bars = sparkline(f.accepted_per_round, top, width)
        lengths = sparkline(f.draft_lengths, top, width) if f.draft == "auto" else ""
        return Group(
            Text("Speed", style="bold"),
            _grid(("tokens/s", number(f.tps, "{:.1f}")), ("speedup", speedup(f))),
            Text("Speculation", style="bold"),
            _grid(
                ("drafter", f.drafter or "none"),
                ("draft len", draft_length(f)),
                ("accepted", accepted(f)),
                ("mean len", number(f.mean_accepted if f.tokens else None, "{:.2f} tok/round")),
                ("rounds", str(f.rounds)),
            ),
            Text(bars, style="green") if bars else Text("accepted drafts per round", style="dim"),
            *([Text(lengths, style="cyan")] if lengths else []),
            Text("Context", style="bold"),
            _grid(
                ("prompt", f"{f.prompt_tokens} tok" + (f", {f.reused} cached" if f.prompt_tokens else "")),
                ("answer", f"{f.tokens} tok"),
            ),
        )


def _grid(*rows: tuple[str, str]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=9)
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, value)
    return grid
