"""What the next answer is generated with; changed on the settings screen."""

from __future__ import annotations

from dataclasses import dataclass

from specmlx.drafters import NGRAM, NONE
from specmlx.engine import GenerationConfig
from specmlx.policy import START_DRAFT, DraftPolicy
from specmlx.sampling import SamplingParams

AUTO = "auto"  # the draft length chosen each round
BUILTIN_LABELS = {NGRAM: "prompt lookup", NONE: "none (plain decoding)"}


def drafter_label(name: str) -> str:
    """What the screen calls a drafter: its own name, or what prompt lookup and none do."""
    return BUILTIN_LABELS.get(name, name)


@dataclass(frozen=True)
class ChatSettings:
    """Sampling and speculation for the next answer.

    `drafter` is a drafter's name (`Drafter.name`); None means the one the
    models were loaded with. `speculation=False` decodes with no drafter but
    keeps `drafter`, so turning speculation back on restores the earlier
    choice. `num_draft` None ("auto") lets each round choose its draft length
    from what this session measured.
    """

    temp: float = 0.0
    top_p: float = 1.0
    num_draft: int | None = START_DRAFT
    max_tokens: int = 1024
    drafter: str | None = None
    speculation: bool = True
    system: str = ""

    def __post_init__(self) -> None:
        self.generation_config()  # the engine's own checks, as one-line SpecmlxErrors

    @property
    def draft_label(self) -> str:
        return AUTO if self.num_draft is None else str(self.num_draft)

    @property
    def active_drafter(self) -> str | None:
        return self.drafter if self.speculation else NONE

    def generation_config(self, stop: tuple[str, ...] = ()) -> GenerationConfig:
        return GenerationConfig(
            max_tokens=self.max_tokens,
            sampling=SamplingParams(temp=self.temp, top_p=self.top_p),
            policy=DraftPolicy(num_draft=self.num_draft),
            stop=stop,
        )
