"""Which runs make up one prompt's turn: every mode, drafter, temperature and
draft length. The same list is replayed for every prompt, so machine drift
(thermal throttling, a busy neighbour) hits all runs alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .lineup import Entrant

TARGET = "target"  # the target alone, through mlx-lm's stream_generate
MLX_LM_SPEC = "mlx-lm-spec"  # mlx-lm's speculative decoding, same drafter model
SPECMLX = "specmlx"
MODES = (TARGET, MLX_LM_SPEC, SPECMLX)


@dataclass(frozen=True)
class RunSpec:
    mode: str
    drafter: str  # an entrant's name; "" for the target alone
    temp: float
    num_draft: int | None  # None: chosen each round

    @property
    def label(self) -> str:
        if self.mode == TARGET:
            return f"target t={self.temp:g}"
        return f"{self.mode} {self.drafter} t={self.temp:g} k={'auto' if self.num_draft is None else self.num_draft}"


def plan_runs(entrants: Sequence[Entrant], temps: Sequence[float], num_drafts: Sequence[int],
              modes: Sequence[str] = MODES) -> list[RunSpec]:
    """One prompt's runs. mlx-lm-spec only for model drafters without variants
    (mlx-lm drafts with a model only); `none` and automatic lengths once per
    temperature, `+k=N` at N only. Only the modes in `modes`: an
    acceptance-only comparison can skip the slow target."""
    runs = []
    for temp in temps:
        runs.append(RunSpec(TARGET, "", temp, 0))
        for entrant in entrants:
            for k in entrant.draft_lengths(num_drafts):
                if entrant.baseline:
                    runs.append(RunSpec(MLX_LM_SPEC, entrant.name, temp, k))
                runs.append(RunSpec(SPECMLX, entrant.name, temp, k))
    return [run for run in runs if run.mode in modes]
