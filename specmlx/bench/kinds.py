"""Figures per kind of prompt (`kind` in the prompts file: tool-call against prose, say): for each
mode, drafter, temperature and draft length, the tokens per round and the speed-up over the target
alone on the same kind's prompts. Only when the prompts have more than one kind.

The same sums as the main table (`summary.py`): rates are ratios of sums over the kind's prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .plan import TARGET
from .runs import Measurement
from .summary import Row, summarize

COLUMNS = ("mode", "drafter", "temp", "k", "kind", "prompts", "tokens", "tokens/round", "× target")


@dataclass(frozen=True)
class KindRow:
    mode: str
    drafter: str
    temp: float
    num_draft: int | None
    kind: str
    prompts: int
    tokens: int
    mean_accepted: float  # tokens per round (target forward)
    speedup: float | None  # the kind's tokens/s over the target alone's on the kind's prompts

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def by_kind(measurements: Sequence[Measurement], kinds: dict[str, str]) -> list[KindRow]:
    """One row per (mode, drafter, temp, num_draft) and kind, kinds in the order first seen;
    `kinds` maps each prompt id to its kind. Empty unless there is more than one kind."""
    order = list(dict.fromkeys(kinds[m.prompt_id] for m in measurements))
    if len(order) < 2:
        return []
    rows: list[KindRow] = []
    for kind in order:
        rows += [_kind_row(row, kind) for row in summarize([m for m in measurements
                                                            if kinds[m.prompt_id] == kind], None)]
    position = {(r.mode, r.drafter, r.temp, r.num_draft): i for i, r in enumerate(summarize(measurements, None))}
    return sorted(rows, key=lambda r: position[(r.mode, r.drafter, r.temp, r.num_draft)])


def _kind_row(row: Row, kind: str) -> KindRow:
    return KindRow(mode=row.mode, drafter=row.drafter, temp=row.temp, num_draft=row.num_draft, kind=kind,
                   prompts=row.prompts, tokens=row.tokens, mean_accepted=row.mean_accepted,
                   speedup=None if row.mode == TARGET else row.speedup)


def _cells(row: KindRow) -> list[str]:
    return [row.mode, row.drafter or "–", f"{row.temp:g}", "auto" if row.num_draft is None else str(row.num_draft),
            row.kind or "–", str(row.prompts), str(row.tokens), f"{row.mean_accepted:.2f}",
            "–" if row.speedup is None else f"{row.speedup:.2f}×"]


def kinds_table(rows: Sequence[KindRow]) -> str:
    """The per-kind markdown table; empty text for no rows (a single kind)."""
    if not rows:
        return ""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    return "\n".join(lines + ["| " + " | ".join(_cells(row)) + " |" for row in rows])
