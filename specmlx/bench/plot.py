"""Speed-up over the target alone against draft length: one panel per
temperature, one line per mode and drafter, Leviathan's prediction dotted.

matplotlib is optional: `require` is called before any model loads, so a
missing one is a one-line error at once, not after an hour of runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import SpecmlxError
from .plan import MLX_LM_SPEC, TARGET
from .summary import Row


def require() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecmlxError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None


def series(rows: Sequence[Row], temp: float) -> dict[tuple[str, str], list[Row]]:
    """Speculative rows of a fixed or starting draft length at `temp`, by (mode,
    drafter), sorted by draft length."""
    out: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.temp == temp and row.mode != TARGET and row.num_draft and row.speedup is not None:
            out.setdefault((row.mode, row.drafter), []).append(row)
    return {key: sorted(group, key=lambda r: r.num_draft) for key, group in out.items()}


def write_plot(rows: Sequence[Row], path: Path, title: str) -> None:
    require()
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    temps = sorted({r.temp for r in rows})
    fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4.2), squeeze=False, sharey=True)
    for ax, temp in zip(axes[0], temps):
        for (mode, drafter), group in series(rows, temp).items():
            ks = [r.num_draft for r in group]
            style = "--" if mode == MLX_LM_SPEC else "-"
            line, = ax.plot(ks, [r.speedup for r in group], style, marker="o", label=f"{mode} · {drafter}")
            predicted = [(r.num_draft, r.predicted_speedup) for r in group if r.predicted_speedup is not None]
            if predicted and mode != MLX_LM_SPEC:
                ax.plot(*zip(*predicted), ":", color=line.get_color(), label=f"predicted · {drafter}")
        autos = [r for r in rows if r.temp == temp and r.num_draft is None and r.speedup is not None]
        for row in autos:  # a length chosen each round has no k: a level across the panel
            ax.axhline(row.speedup, linestyle="-.", color=f"C{len(ax.lines) % 10}", label=row.drafter)
        ax.set_xticks(sorted({r.num_draft for r in rows if r.num_draft}))  # k is whole
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"temperature {temp:g}")
        ax.set_xlabel("draft length k")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("speed-up over the target alone")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as err:
        raise SpecmlxError(f"{path}: cannot write the plot ({err.strerror or err})") from None
    finally:
        plt.close(fig)
