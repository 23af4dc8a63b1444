"""What the next answer is generated with; changed on the settings screen."""

from __future__ import annotations

from dataclasses import dataclass

from specmlx.engine import GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.sampling import SamplingParams

# Drafter choices: a drafter model (if one was loaded), prompt lookup, none.
DRAFTERS = {"model": "drafter model", "ngram": "prompt lookup", "none": "none"}


@dataclass(frozen=True)
class ChatSettings:
    """Sampling and speculation for the next answer.

    `speculation=False` decodes with no drafter but keeps `drafter`, so turning
    speculation back on restores the earlier choice.
    """

    temp: float = 0.0
    top_p: float = 1.0
    num_draft: int = 4
    max_tokens: int = 1024
    drafter: str = "model"
    speculation: bool = True
    system: str = ""

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise SpecmlxError(f"drafter must be one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        self.generation_config()  # the engine's own checks, as one-line SpecmlxErrors

    @property
    def active_drafter(self) -> str:
        return self.drafter if self.speculation else "none"

    def generation_config(self, stop: tuple[str, ...] = ()) -> GenerationConfig:
        return GenerationConfig(
            max_tokens=self.max_tokens,
            sampling=SamplingParams(temp=self.temp, top_p=self.top_p),
            policy=DraftPolicy(num_draft=self.num_draft),
            stop=stop,
        )
