"""Per-prompt speed-ups and the bench's robust headline: their median and spread.

A row's total tok/s (total tokens / total seconds) lets one slow prompt on a busy machine decide
it; the median of per-prompt ratios does not move with one spike. Each ratio pairs a run with the
target alone's run of the same prompt at the same temperature: one of each per bench (prompt ids
are unique, there are no repeats), run in the same prompt's turn through the plan (`driver.run_all`),
so both figures come from the same minutes of the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

from .runs import Measurement


@dataclass(frozen=True)
class PromptRatios:
    """tokens/s over the target alone's, prompt by prompt, in the order the prompts ran."""

    by_prompt: tuple[tuple[str, float], ...]  # (prompt id, ratio), at least one

    @property
    def median(self) -> float:
        return median(ratio for _, ratio in self.by_prompt)

    @property
    def lowest(self) -> tuple[float, str]:
        """The worst prompt's ratio, and the prompt (the first run, on a tie)."""
        prompt, ratio = min(self.by_prompt, key=lambda pair: pair[1])
        return ratio, prompt

    @property
    def highest(self) -> tuple[float, str]:
        prompt, ratio = max(self.by_prompt, key=lambda pair: pair[1])
        return ratio, prompt


def tokens_per_s(m: Measurement) -> float:
    return m.generated / m.decode_s if m.decode_s > 0 else 0.0


def prompt_ratios(group: Sequence[Measurement], target: dict[str, Measurement]) -> PromptRatios | None:
    """Each run's tokens/s over `target`'s (the target alone by prompt id, the group's temperature) on
    the same prompt; None where no prompt has a target run that generated anything."""
    pairs = tuple((m.prompt_id, tokens_per_s(m) / tokens_per_s(target[m.prompt_id])) for m in group
                  if m.prompt_id in target and tokens_per_s(target[m.prompt_id]) > 0)
    return PromptRatios(pairs) if pairs else None
